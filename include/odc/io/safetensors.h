#pragma once
// The safetensors format (Hugging Face checkpoints): an 8-byte little-endian header length N, N
// bytes of JSON ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}), then the raw little-endian tensor bytes; offsets are relative
// to the start of that data region.
//
// The reader maps the file read-only and validates everything before handing out a byte span, so
// a truncated or corrupted checkpoint is an odc::Error naming the file and the tensor, never an
// out-of-bounds read. Writing: safetensors_writer.h; a checkpoint in several files (Hugging Face's
// shards and their index): safetensors_sharded.h.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/tensor.h"

namespace odc::io {

// The header key of the file's string metadata, which no tensor may be named.
inline constexpr char kSafetensorsMetadataKey[] = "__metadata__";

// The safetensors dtype code ("F32", "BF16", ...) of a DType, and back. from_code throws odc::Error
// for codes this trainer does not handle (e.g. "F8_E4M3", "BOOL").
std::string_view safetensors_dtype_code(DType dtype);
DType safetensors_dtype_from_code(std::string_view code);

struct SafetensorsTensorInfo {
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;  // byte offsets relative to the data region
  std::uint64_t end = 0;
  std::span<const std::byte> bytes;  // the tensor's bytes inside the mapping (may be unaligned)
  std::int64_t numel() const { return shape_numel(shape); }
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws odc::Error naming the file (and tensor) on any problem.
  explicit SafetensorsFile(const std::string& path);
  // Validates an in-memory image of a file (fuzzing, data that never touched a disk); `name`
  // stands for the path in messages.
  SafetensorsFile(std::vector<std::byte> contents, std::string name);
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data offsets (the order they were written).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws odc::Error naming the file and the missing tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Where the data region begins in the file (8 + the header's length): a tensor's bytes lie at
  // data_start() + info.begin, for a reader that reads the file instead of its mapping.
  std::uint64_t data_start() const { return data_start_; }

  // Copies a floating-point tensor (f32, bf16, f16, f64) into fp32, checking that it holds
  // exactly `expected_numel` elements when expected_numel >= 0.
  std::vector<float> read_f32(const std::string& name, std::int64_t expected_numel = -1) const;
  // Converts elements [begin, begin + count) of a floating-point tensor (row-major flat order) to
  // fp32 into out[0, count): loading one rank's shard without converting the whole tensor. The
  // file's pages that lie wholly inside the range are released from this process once converted
  // (madvise DONTNEED: they stay in the page cache, and a later read maps them again), so a load
  // holds the weights once, in `out`, not also the file.
  void read_f32_range(const std::string& name, std::int64_t begin, std::int64_t count,
                      float* out) const;

 private:
  void convert_to_f32(DType dtype, const std::string& name, const std::byte* src, std::int64_t count,
                      float* out) const;
  // Validates the header of `file` (the whole file image) and records every tensor's byte span.
  void parse(std::span<const std::byte> file);
  // munmap()s the read-only mapping of the whole file; the mapping outlives the descriptor.
  struct Unmap {
    std::size_t size;
    void operator()(std::byte* base) const noexcept;
  };
  std::string path_;
  std::unique_ptr<std::byte, Unmap> mapping_;
  std::vector<std::byte> contents_;  // the in-memory image, when not mapped from a file
  std::map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::uint64_t data_start_ = 0;
};

}  // namespace odc::io

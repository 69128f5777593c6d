#pragma once
// The safetensors format (Hugging Face checkpoints): an 8-byte little-endian header length N, N
// bytes of JSON ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}), then the raw little-endian tensor bytes; offsets are relative
// to the start of that data region.
//
// The reader maps the file read-only and validates everything before handing out a byte span, so
// a truncated or corrupted checkpoint is an odc::Error naming the file and the tensor, never an
// out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/tensor.h"

namespace odc::io {

// One tensor to write: `data` points at shape_numel(shape) * dtype_size(dtype) bytes, which must
// stay valid during write_safetensors.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const void* data = nullptr;
};

// Writes the tensors (back to back, in the given order) to `path`. The file is written to
// `path + ".tmp"`, flushed to disk and then renamed, so a crash never leaves a partial file under
// the final name. Duplicate or reserved ("__metadata__") names are errors.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

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
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data offsets (the order they were written).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws odc::Error naming the file and the missing tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies a floating-point tensor (f32, bf16, f16, f64) into fp32, checking that it holds
  // exactly `expected_numel` elements when expected_numel >= 0.
  std::vector<float> read_f32(const std::string& name, std::int64_t expected_numel = -1) const;

 private:
  // munmap()s the read-only mapping of the whole file; the mapping outlives the descriptor.
  struct Unmap {
    std::size_t size;
    void operator()(std::byte* base) const noexcept;
  };
  std::string path_;
  std::unique_ptr<std::byte, Unmap> mapping_;
  std::map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace odc::io

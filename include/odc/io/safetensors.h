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
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/file_descriptor.h"
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

// Writes one safetensors file whose tensor list is known up front (the header comes first) but
// whose data arrives in pieces at known places, in any order: a rank's shard of a unit lands where
// its elements belong while the other ranks' shards arrive, so no writer holds a whole tensor.
// Same crash safety as write_safetensors: the bytes go to `path + ".tmp"`, which commit() fsyncs
// and renames; destroying an uncommitted writer removes it.
class SafetensorsPieceWriter {
 public:
  // `layout` gives name, dtype and shape of every tensor in file order (`data` is ignored).
  SafetensorsPieceWriter(std::string path, const std::vector<SafetensorsEntry>& layout,
                         const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsPieceWriter();
  SafetensorsPieceWriter(const SafetensorsPieceWriter&) = delete;
  SafetensorsPieceWriter& operator=(const SafetensorsPieceWriter&) = delete;

  // Writes `bytes` at byte `offset` of the data region (the tensors back to back in layout order).
  // Pieces must not overlap: commit() counts the bytes written against the data region's size.
  void write_at(std::uint64_t offset, const void* data, std::size_t bytes);
  // The data region's size and where each tensor of the layout begins in it.
  std::uint64_t data_bytes() const { return data_bytes_; }
  std::uint64_t tensor_offset(std::size_t index) const { return offsets_.at(index); }
  // After the last piece: fsync, close, rename to the final path (odc::Error when bytes are missing).
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  std::vector<std::uint64_t> offsets_;  // of each tensor in the data region
  std::uint64_t data_start_ = 0;        // of the data region in the file
  std::uint64_t data_bytes_ = 0;
  std::uint64_t written_ = 0;
  std::optional<FileDescriptor> fd_;  // open until commit()
};

// Streams one safetensors file tensor by tensor, in layout order (a SafetensorsPieceWriter whose
// pieces are whole tensors, one after another), so a writer holds one tensor at a time.
class SafetensorsStreamWriter {
 public:
  // `layout` gives name, dtype and shape of every tensor in file order (`data` is ignored).
  SafetensorsStreamWriter(std::string path, const std::vector<SafetensorsEntry>& layout,
                          const std::map<std::string, std::string>& metadata = {});

  // Appends the bytes of the next tensor of the layout, which must be named `name`.
  void append(const std::string& name, const void* data);
  // After the last tensor: fsync, close, rename to the final path.
  void commit();
  const std::string& path() const { return file_.path(); }

 private:
  std::vector<SafetensorsEntry> layout_;
  std::size_t next_ = 0;
  SafetensorsPieceWriter file_;
};

// HF's file names: the index of a sharded checkpoint and the single file of an unsharded one.
inline constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";
inline constexpr char kSafetensorsSingleName[] = "model.safetensors";

// How a layout's tensors are split into files the way Hugging Face does: one file
// model.safetensors when the whole layout fits in `max_shard_bytes`, otherwise shards
// model-00001-of-0000N.safetensors holding at most max_shard_bytes of tensor data each (the
// header comes on top, as in transformers), filled greedily in layout order as transformers'
// save_pretrained does. A tensor larger than the limit gets a shard of its own. With `groups`
// (one number per tensor, equal for neighbours that must share a file: a model unit's tensors,
// which one rank writes), a group is placed as one tensor would be; empty: every tensor alone.
struct SafetensorsShardPlan {
  std::vector<std::string> files;    // file names, in order
  std::vector<std::size_t> file_of;  // the file of each layout entry
  bool sharded() const { return files.size() > 1; }
};
SafetensorsShardPlan plan_safetensors_shards(const std::vector<SafetensorsEntry>& layout, std::int64_t max_shard_bytes,
                                             const std::vector<int>& groups = {});
// The text of a sharded plan's model.safetensors.index.json: {"metadata": {"total_size": bytes},
// "weight_map": {tensor: file}}.
std::string safetensors_index_text(const std::vector<SafetensorsEntry>& layout, const SafetensorsShardPlan& plan);

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

// A model's tensors spread over one or more safetensors files: a single file, or the shards that
// a Hugging Face index (model.safetensors.index.json) lists. Opening validates that every file
// the index names exists and holds the tensors mapped to it, and that no shard holds a tensor the
// index does not map to it (a stale shard from another export would otherwise go unnoticed).
class SafetensorsShards {
 public:
  // `path` ending in ".json" is an index (shard names are relative to its directory); anything
  // else is a single safetensors file.
  explicit SafetensorsShards(const std::string& path);

  const std::string& path() const { return path_; }
  bool sharded() const { return sharded_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Every tensor name, in file order and data order within each file.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return file_of_.count(name) != 0; }
  // The file holding tensor `name`; throws odc::Error naming the checkpoint and the tensor.
  const SafetensorsFile& file_of(const std::string& name) const;
  const SafetensorsTensorInfo& info(const std::string& name) const { return file_of(name).info(name); }

 private:
  std::string path_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t> file_of_;
};

}  // namespace odc::io

#pragma once
// Writing safetensors files (the format: safetensors.h): a whole file at once, a file whose data
// arrives in pieces at known places, or one streamed tensor by tensor; each written under a
// temporary name and renamed into place once complete.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
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

}  // namespace odc::io

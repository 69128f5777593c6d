#pragma once
// Writing Hugging Face directories (io/hf_checkpoint.h reads them): config.json, the safetensors
// (model.safetensors, or shards plus model.safetensors.index.json) and the tokenizer files, staged
// under DIR.tmp and renamed into place.
//
// A shard file holds whole units (model/units.h), so that one process writes each file: an export
// over several ranks hands file k to rank k mod ranks, gathers each unit of it to that rank piece
// by piece, and each piece goes straight to its place in the file (SafetensorsPieceWriter): no
// rank holds a whole unit, and the ranks write their files side by side. Every writer, one
// process or many, lays the files out the same way, so the same model gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/io/safetensors_sharded.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"

namespace odc::io {

// The tensors of an export (HF names, in unit order; tied embeddings once) and the files they go
// to: plan_safetensors_shards with each unit as one group.
struct HfExportLayout {
  DType dtype = DType::f32;
  std::vector<model::UnitLayout> units;
  std::vector<SafetensorsEntry> tensors;
  SafetensorsShardPlan plan;
  std::vector<std::size_t> unit_file;      // the file of each unit
  std::vector<std::uint64_t> unit_offset;  // where each unit's first element lies in its file's data region

  std::size_t num_files() const { return plan.files.size(); }
  // The tensors of file `file`, in file order (a SafetensorsPieceWriter's layout).
  std::vector<SafetensorsEntry> file_tensors(std::size_t file) const;
  // The units of file `file`: [first, end).
  std::pair<int, int> file_units(std::size_t file) const;
  // The rank of `ranks` that writes file `file`: round-robin from rank 0.
  static int writer(std::size_t file, int ranks) { return static_cast<int>(file % static_cast<std::size_t>(ranks)); }
};
HfExportLayout hf_export_layout(const model::LlamaConfig& config, DType dtype, std::int64_t max_shard_bytes);

// The metadata of an export's safetensors files: {"format": "pt"} (transformers refuses files
// without the framework's name).
std::map<std::string, std::string> hf_safetensors_metadata();

// fp32 values as `dtype`'s bytes (f32, bf16 or f16, rounded to nearest even) into `out`, which
// holds values.size() * dtype_size(dtype) bytes.
void encode_f32(std::span<const float> values, DType dtype, std::byte* out);

// DIR.tmp, where an export to DIR is staged ("out/" and "out" are the same target; the staging
// directory is a sibling, never a child).
std::string hf_staging_path(const std::string& dir);

// An HF directory being written. The constructor checks the target and the settings (a directory
// that is not an HF checkpoint is never replaced), removes a DIR.tmp left by a crashed export and
// makes a fresh one holding config.json; the safetensors files go into staging() (from any rank of
// an export, which must see the same file system). commit() completes it: the index when sharded,
// the tokenizer files, fsyncs, and the swap into place. Destroyed uncommitted (an error on the
// way), it removes DIR.tmp: DIR stays as it was.
//
// From `copy_from` (when given) tokenizer.json, tokenizer_config.json, special_tokens_map.json and
// generation_config.json are copied where present, and config.json's bos/eos/pad token ids are
// carried over; replacing an HF directory without `copy_from` keeps that directory's.
//
// Crash safety: an existing DIR is first renamed to DIR.old and removed after the swap, so a crash
// leaves DIR complete (old or new) or, between the two renames, absent with both DIR.old and
// DIR.tmp complete; never half-written.
class HfDirectoryWriter {
 public:
  HfDirectoryWriter(const std::string& dir, const model::LlamaConfig& config, const std::string& architecture,
                    DType dtype, const std::string& copy_from);
  ~HfDirectoryWriter();
  HfDirectoryWriter(const HfDirectoryWriter&) = delete;
  HfDirectoryWriter& operator=(const HfDirectoryWriter&) = delete;

  const std::string& staging() const { return staging_; }
  // After every file of `layout` is committed in staging().
  void commit(const HfExportLayout& layout);

 private:
  std::string target_;
  std::string staging_;
  std::string copy_from_;
  std::string where_;
  bool committed_ = false;
};

}  // namespace odc::io

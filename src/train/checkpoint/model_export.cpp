#include "odc/train/checkpoint/model_export.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/hf_export.h"
#include "odc/model/model_keys.h"
#include "odc/train/config/checkpoint_keys.h"

namespace odc::train {

namespace {

// `path` made absolute with its symlinks resolved as far as it exists, without a trailing slash.
std::filesystem::path resolved(const std::string& path) {
  std::error_code ec;
  std::filesystem::path out = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  if (ec) out = std::filesystem::absolute(path).lexically_normal();
  if (!out.has_filename() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();
  return out;
}

// The file this rank writes, or nothing. An I/O error is kept, not thrown: the rank goes on taking
// part in the gathers, so that every rank learns of it at the end instead of waiting for a rank
// that left.
class FileOut {
 public:
  void open(const std::string& path, const std::vector<io::SafetensorsEntry>& tensors) {
    attempt([&] { file_ = std::make_unique<io::SafetensorsPieceWriter>(path, tensors, io::hf_safetensors_metadata()); });
  }
  void write_at(std::uint64_t offset, const std::byte* data, std::size_t bytes) {
    if (file_) attempt([&] { file_->write_at(offset, data, bytes); });
  }
  void commit() {
    if (file_) attempt([&] { file_->commit(); });
    file_.reset();
  }
  const std::string& error() const { return error_; }

 private:
  template <typename F>
  void attempt(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      if (error_.empty()) error_ = e.what();
      file_.reset();  // removes its partial file
    }
  }
  std::unique_ptr<io::SafetensorsPieceWriter> file_;
  std::string error_;
};

// Every rank's error of a collective step, on every rank: the first one fails everywhere, naming its rank.
void fail_on_any(distributed::HostGroup& group, const std::string& mine, const char* what) {
  const auto errors = group.all_gather_text(mine, what);
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) fail("checkpoint.export_hf (rank {}): {}", r, errors[r]);
  }
}

DType export_dtype(const Config& config, const ModelSource& source) {
  const std::string wanted = keys::checkpoint_export_dtype.read(config);
  if (wanted == "auto") return source.dtype.value_or(DType::f32);
  return wanted == "bfloat16" ? DType::bf16 : wanted == "float16" ? DType::f16 : DType::f32;
}

}  // namespace

void check_export_target(const Config& config) {
  const std::string hf = keys::checkpoint_export_hf.read(config);
  const std::string base = keys::model_checkpoint.read(config);
  if (hf.empty() || base.empty()) return;
  std::error_code ec;
  const bool same = resolved(hf) == resolved(base) || std::filesystem::equivalent(hf, base, ec);
  if (!same) return;
  fail("checkpoint.export_hf ('{}', from {}) and model.checkpoint ('{}', from {}) are the same directory: the "
       "export at the end of the run would replace the base model it starts from; set checkpoint.export_hf to "
       "another directory", hf, keys::checkpoint_export_hf.source(config), base, keys::model_checkpoint.source(config));
}

std::int64_t export_piece_elements(std::int64_t shard, int ranks, DType dtype) {
  const auto per_rank = static_cast<std::int64_t>(kExportGatherBytes / (static_cast<std::size_t>(ranks) * dtype_size(dtype)));
  return std::clamp<std::int64_t>(per_rank, 1, std::max<std::int64_t>(shard, 1));
}

void export_hf(const Config& config, distributed::HostGroup& group, const distributed::ShardStore& store,
               const model::LlamaConfig& model_config, const ModelSource& source) {
  const auto start = std::chrono::steady_clock::now();
  check_export_target(config);
  const std::string dir = keys::checkpoint_export_hf.read(config);
  const DType dtype = export_dtype(config, source);
  const std::string architecture =
      !source.architecture.empty() ? source.architecture : io::default_hf_architecture(model_config);
  // Settings that cannot be exported fail here on every rank, before any rank waits in a gather.
  io::check_hf_architecture(architecture, model_config, "checkpoint.export_hf");
  const io::HfExportLayout files =
      io::hf_export_layout(model_config, dtype, keys::checkpoint_export_shard_bytes.read(config));

  // Rank 0 makes DIR.tmp (with config.json); the others learn whether it could.
  std::optional<io::HfDirectoryWriter> directory;
  std::string error;
  if (group.is_root()) {
    try {
      // The tokenizer files come from model.checkpoint; a resumed run needs no base checkpoint, so
      // one that was moved away leaves the export without them (said, not an error at the run's end).
      std::string tokenizer_from = keys::model_checkpoint.read(config);
      if (!tokenizer_from.empty() && !std::filesystem::is_directory(tokenizer_from)) {
        spdlog::warn("checkpoint.export_hf: model.checkpoint '{}' is not there: {} gets no tokenizer files (copy them "
                     "with odc-ckpt export --tokenizer-from)", tokenizer_from, dir);
        tokenizer_from.clear();
      }
      directory.emplace(dir, model_config, architecture, dtype, tokenizer_from);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  group.broadcast(error, "the export's staging directory");
  if (!error.empty()) fail("{}", error);

  const std::string staging = io::hf_staging_path(dir);
  const auto& layout = store.layout();
  const int ranks = group.size();
  const std::size_t element_bytes = dtype_size(dtype);
  store.pull_to_host();  // a device store's masters, copied to its host staging
  const std::span<const float> masters = store.host_masters();
  // Each file is written by one rank (round-robin); every unit of it is gathered to that rank in
  // pieces of at most kExportGatherBytes in all, each rank's part of a piece encoded by that rank
  // and written where its elements belong. The files stay open until every piece is sent, so that
  // their fsyncs run side by side.
  std::vector<FileOut> mine(files.num_files());
  std::vector<std::byte> piece;
  std::vector<std::byte> gathered;
  for (std::size_t f = 0; f < files.num_files(); ++f) {
    const int writer = io::HfExportLayout::writer(f, ranks);
    const bool writes = group.rank() == writer;
    if (writes) mine[f].open((std::filesystem::path(staging) / files.plan.files[f]).string(), files.file_tensors(f));
    const auto [first, end] = files.file_units(f);
    for (int u = first; u < end; ++u) {
      const std::int64_t shard = layout.unit(u).shard;
      const std::int64_t numel = layout.unit(u).numel;
      const std::int64_t step = export_piece_elements(shard, ranks, dtype);
      const auto owned = masters.subspan(static_cast<std::size_t>(store.offset(u)), static_cast<std::size_t>(shard));
      for (std::int64_t k = 0; k < shard; k += step) {
        const auto n = static_cast<std::size_t>(std::min(step, shard - k));
        piece.resize(n * element_bytes);
        io::encode_f32(owned.subspan(static_cast<std::size_t>(k), n), dtype, piece.data());
        gathered.resize(writes ? piece.size() * static_cast<std::size_t>(ranks) : 0);
        group.gather_to(writer, piece, gathered, "the export's gather of unit weights");
        if (!writes) continue;
        for (int r = 0; r < ranks; ++r) {
          // Rank r's piece holds elements [r * shard + k, + n) of the unit; those past its end are padding.
          const std::int64_t begin = r * shard + k;
          const std::int64_t real = std::clamp<std::int64_t>(numel - begin, 0, static_cast<std::int64_t>(n));
          if (real == 0) continue;
          mine[f].write_at(files.unit_offset[static_cast<std::size_t>(u)] + static_cast<std::uint64_t>(begin) * element_bytes,
                           gathered.data() + static_cast<std::size_t>(r) * piece.size(),
                           static_cast<std::size_t>(real) * element_bytes);
        }
      }
    }
  }
  for (auto& file : mine) {
    file.commit();
    if (error.empty()) error = file.error();
  }
  fail_on_any(group, error, "the export's files");
  if (group.is_root()) {
    try {
      directory->commit(files);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  group.broadcast(error, "the export's commit");
  if (!error.empty()) fail("{}", error);
  if (group.is_root()) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("export: {} ({}) written to {} in {:.2f} s: {} file{} by {} rank{}", architecture, dtype_name(dtype),
                 dir, seconds, files.num_files(), files.num_files() == 1 ? "" : "s",
                 std::min<std::size_t>(files.num_files(), static_cast<std::size_t>(ranks)),
                 std::min<std::size_t>(files.num_files(), static_cast<std::size_t>(ranks)) == 1 ? "" : "s");
  }
}

}  // namespace odc::train

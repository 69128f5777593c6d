#include "odc/train/model_export.h"

#include <chrono>
#include <filesystem>
#include <vector>

#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"

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

}  // namespace

void check_export_target(const Config& config) {
  const std::string hf = config.get_string("checkpoint.export_hf");
  const std::string base = config.get_string("model.checkpoint");
  if (hf.empty() || base.empty()) return;
  std::error_code ec;
  const bool same = resolved(hf) == resolved(base) || std::filesystem::equivalent(hf, base, ec);
  if (!same) return;
  fail("checkpoint.export_hf ('{}', from {}) and model.checkpoint ('{}', from {}) are the same directory: the "
       "export at the end of the run would replace the base model it starts from; set checkpoint.export_hf to "
       "another directory", hf, config.source_of("checkpoint.export_hf"), base, config.source_of("model.checkpoint"));
}

void export_hf(const Config& config, distributed::HostGroup& group, const distributed::ShardStore& store,
               const model::LlamaConfig& model_config, const ModelSource& source) {
  const auto start = std::chrono::steady_clock::now();
  check_export_target(config);
  const std::string dir = config.get_string("checkpoint.export_hf");
  const std::string wanted = config.get_string("checkpoint.export_dtype");
  DType dtype = DType::f32;
  if (wanted == "auto") {
    if (source.dtype) dtype = *source.dtype;
  } else {
    dtype = wanted == "bfloat16" ? DType::bf16 : wanted == "float16" ? DType::f16 : DType::f32;
  }
  const std::string architecture =
      !source.architecture.empty() ? source.architecture : io::default_hf_architecture(model_config);
  // Settings that cannot be exported fail here on every rank, before any rank waits in a gather.
  // (A failure while rank 0 writes ends odc-train, which aborts the other ranks.)
  io::check_hf_architecture(architecture, model_config, "checkpoint.export_hf");
  const auto& layout = store.layout();
  store.pull_to_host();  // a device store's masters, copied to its host staging
  const std::span<const float> masters = store.host_masters();
  std::vector<float> padded;
  auto gather = [&](int unit) {
    const auto shard = static_cast<std::size_t>(layout.unit(unit).shard);
    padded.resize(group.is_root() ? static_cast<std::size_t>(layout.unit(unit).padded) : 0);
    group.gather_values<float>(masters.subspan(static_cast<std::size_t>(store.offset(unit)), shard), padded, "the export's gather of unit weights");
  };
  if (group.is_root()) {
    // The tokenizer files come from model.checkpoint; a resumed run needs no base checkpoint, so
    // one that was moved away leaves the export without them (said, not an error at the run's end).
    std::string tokenizer_from = config.get_string("model.checkpoint");
    if (!tokenizer_from.empty() && !std::filesystem::is_directory(tokenizer_from)) {
      spdlog::warn("checkpoint.export_hf: model.checkpoint '{}' is not there: {} gets no tokenizer files (copy them "
                   "with odc-ckpt export --tokenizer-from)", tokenizer_from, dir);
      tokenizer_from.clear();
    }
    io::write_hf_checkpoint(dir, model_config, architecture, dtype, [&](int unit, float* out) {
      gather(unit);
      std::copy(padded.begin(), padded.begin() + layout.unit(unit).numel, out);
    }, 5'000'000'000, tokenizer_from);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("export: {} ({}) written to {} in {:.2f} s", architecture, dtype_name(dtype), dir, seconds);
  } else {
    for (int u = 0; u < layout.num_units(); ++u) gather(u);
  }
  group.barrier("the end of the export");
}

}  // namespace odc::train

// odc_hf_logits_dump --checkpoint DIR --case CASE.json --out LOGITS.safetensors [--world N]
//
// Loads a Hugging Face checkpoint through io::HfCheckpoint and writes the forward logits of one
// packed microbatch, for tests/parity/test_hf_logits.py to compare against its own PyTorch
// reference (which parses the same safetensors by itself).
//   CASE.json:  {"sequences": [[token ids], ...]}  packed in order into one microbatch
//   output:     "logits" [tokens, vocab] f32; metadata "architecture" and "dtype" as loaded
// The weights are loaded the way ranks load their shards: each unit's buffer is padded to a
// multiple of --world (default 3) and read shard by shard with read_unit_range, so the ranges
// cut through tensors and run into the padding.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/io/safetensors_writer.h"
#include "odc/model/batch.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"

namespace {

using UnitBuffers = std::vector<std::vector<float>>;

UnitBuffers load_units(const odc::io::HfCheckpoint& ckpt, std::int64_t world) {
  UnitBuffers buffers;
  for (std::size_t u = 0; u < ckpt.units().size(); ++u) {
    const std::int64_t numel = ckpt.units()[u].numel;
    const std::int64_t shard = (numel + world - 1) / world;
    std::vector<float> padded(static_cast<std::size_t>(shard * world), -1.0f);
    for (std::int64_t r = 0; r < world; ++r) {
      ckpt.read_unit_range(static_cast<int>(u), r * shard, shard, padded.data() + r * shard);
    }
    for (std::int64_t i = numel; i < shard * world; ++i) {
      if (padded[static_cast<std::size_t>(i)] != 0.0f) odc::fail("unit {}: padding element {} is not zero", u, i);
    }
    padded.resize(static_cast<std::size_t>(numel));
    buffers.push_back(std::move(padded));
  }
  return buffers;
}

int run(const std::string& checkpoint, const std::string& case_path, const std::string& out_path,
        std::int64_t world) {
  std::ifstream case_file(case_path);
  if (!case_file) odc::fail("cannot open case file '{}'", case_path);
  const nlohmann::json spec = nlohmann::json::parse(case_file);

  const odc::io::HfCheckpoint ckpt(checkpoint);
  odc::model::PackedBatch batch;
  for (const auto& s : spec.at("sequences")) {
    const auto ids = s.get<std::vector<std::int32_t>>();
    const std::vector<std::uint8_t> mask(ids.size(), 1);
    batch.append(ids.data(), mask.data(), static_cast<std::int64_t>(ids.size()), 1.0f);
  }
  odc::bench::ResidentWeights weights(ckpt.units(), load_units(ckpt, world));
  odc::model::LlamaModel model(ckpt.config(), std::make_unique<odc::backend::CpuBackend>());
  std::vector<float> logits;
  model.forward(batch, weights, &logits);
  odc::io::write_safetensors(out_path,
                             {{"logits", odc::DType::f32, {batch.num_tokens(), ckpt.config().vocab_size}, logits.data()}},
                             {{"architecture", ckpt.architecture()},
                              {"dtype", std::string(odc::dtype_name(ckpt.dtype()))}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: odc_hf_logits_dump --checkpoint DIR --case CASE.json --out LOGITS.safetensors [--world N]\n";
  std::string checkpoint, case_path, out_path;
  std::int64_t world = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "odc_hf_logits_dump: unexpected argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
    const std::string value = argv[++i];
    if (arg == "--checkpoint") {
      checkpoint = value;
    } else if (arg == "--case") {
      case_path = value;
    } else if (arg == "--out") {
      out_path = value;
    } else if (arg == "--world") {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), world);
      if (ec != std::errc() || end != value.data() + value.size()) world = 0;  // usage error below
    } else {
      std::fprintf(stderr, "odc_hf_logits_dump: unexpected argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (checkpoint.empty() || case_path.empty() || out_path.empty() || world < 1) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    return run(checkpoint, case_path, out_path, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc_hf_logits_dump: error: %s\n", e.what());
    return 1;
  }
}

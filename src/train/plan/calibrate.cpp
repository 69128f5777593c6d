#include "odc/train/plan/calibrate.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "odc/data/data_keys.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_model.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/config/run_settings.h"

namespace odc::train {

data::CostModel calibrate_cost_model(const Config& config, std::vector<CalibrationPoint>* points) {
  const auto model_config = training_model_config(config);
  const RunSettings settings = resolve_run_settings(config, false);
  model::LlamaModel model(model_config, training_backend(settings, 0));
  distributed::ShardLayout layout(model.units(), 1, 0);
  distributed::ShardStore store(layout, model.units(), model_config, settings.model.seed, {}, &model.backend());
  distributed::LocalComm comm(store);

  // Lengths up to the microbatch cap (or the model's context), at most 4096 to keep this short.
  std::int64_t longest = keys::data_max_tokens_per_microbatch.read(config);
  if (longest <= 0) longest = model_config.max_position_embeddings;
  longest = std::min<std::int64_t>(longest, 4096);
  std::vector<std::int64_t> lengths;
  for (std::int64_t s = 64; s <= longest; s *= 2) lengths.push_back(s);
  if (lengths.size() < 3) fail("calibration needs sequences up to at least 256 tokens; the cap is {}", longest);

  std::vector<model::PackedBatch> batches(lengths.size());
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    const auto length = lengths[k];
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(length));
    for (std::int64_t i = 0; i < length; ++i) tokens[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 7 + 3) % model_config.vocab_size);
    batches[k].append(tokens.data(), nullptr, length, 1.0f / static_cast<float>(length));
  }
  // Rounds over all lengths rather than all runs of one length after another: a slow phase of a
  // shared machine then touches every length alike instead of one point of the curve. The first
  // round warms buffers up and is discarded.
  constexpr int kRounds = 8;
  std::vector<double> seconds(lengths.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      comm.begin_minibatch();
      const auto start = std::chrono::steady_clock::now();
      model.train_microbatch(batches[k], comm, comm);
      model.backend().synchronize();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The fastest run: other load on the machine only ever adds time, so the minimum is the best
      // estimate of the work itself (a median still moves with a busy neighbour).
      if (round > 0) seconds[k] = std::min(seconds[k], t);
    }
  }
  if (points != nullptr) {
    for (std::size_t k = 0; k < lengths.size(); ++k) points->push_back({lengths[k], seconds[k]});
  }
  const auto fitted = data::fit_quadratic(lengths, seconds);
  // Only ratios matter to the balancers: scale so that b = 1.
  return fitted.b > 0 ? data::CostModel::quadratic(fitted.a / fitted.b, 1.0) : fitted;
}

}  // namespace odc::train

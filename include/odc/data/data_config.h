#pragma once
// The data.* tunables that odc-train and odc-sim both read (declared once in data_keys.h): packing
// into microbatches, the planners' cost model, and the sampler's shuffle and seed. Each
// schema adds the data.* keys only it reads (odc-train's data.train, data.format, data.balance, ...;
// odc-sim's data.lengths and its synthetic length distribution), and its own data.minibatch_size
// (the trainer's may be left unset for data.global_batch_size) and data.max_length (the
// simulator's truncates the lengths it simulates, the trainer's has a policy, data.over_length):
// the *_sim variants of data_keys.h, written beside the trainer's declarations.
#include <cstdint>
#include <string>
#include <vector>

#include "odc/core/config.h"
#include "odc/data/planner.h"

namespace odc::data {

std::vector<TunableSpec> data_tunables();

// One of data_tunables() by path. A schema lists the shared keys one by one, in its own order:
// the order of --dump-config and of Config::canonical(), which checkpoints and ranks compare.
TunableSpec data_tunable(const std::string& path);

// The planners' inputs as these keys describe them, so that odc-sim plans what odc-train plans.
// data.cost_model with its coefficients; flops takes the model's FLOP rates
// (LlamaConfig::linear_flops_per_token, attention_flops_per_pair).
CostModel cost_model(const Config& config, double linear_flops_per_token, double attention_flops_per_pair);

// Parses data.cost_points ("64:0.0376,128:0.0593,..."): odc::Error naming the item or point.
CostModel measured_cost_model(const std::string& points);
// data.max_tokens_per_microbatch, or where it is 0 the longest sequence times data.packing_ratio;
// where it is auto, `auto_cap` (odc-train's memory plan; odc::Error when not given).
std::int64_t token_cap(const Config& config, std::int64_t longest, std::int64_t auto_cap = 0);

}  // namespace odc::data

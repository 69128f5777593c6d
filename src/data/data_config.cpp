#include "odc/data/data_config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "odc/core/error.h"

namespace odc::data {

std::vector<TunableSpec> data_tunables() {
  using K = ValueKind;
  return {
      tunable("data.max_tokens_per_microbatch", "0",
              "token cap of a packed microbatch; 0 = the longest sequence of the data times data.packing_ratio; "
              "auto = the largest a rank's memory holds (odc-train's memory plan: odc-train --plan-memory)",
              Range::at_least(0), {"auto"}),
      tunable("data.packing_ratio", K::number, "1.0", "multiplies the default token cap (ignored when a cap is set)",
              Range::above(0)),
      tunable("data.cost_model", K::string, "flops",
              "per-sequence cost the planners balance: linear (tokens), quadratic (cost_a*s^2 + cost_b*s), flops "
              "(from the model shape), measured (data.cost_points, interpolated)",
              {"linear", "quadratic", "flops", "measured"}),
      tunable("data.cost_points", K::string, "",
              "measured cost model: LENGTH:SECONDS,... of one sequence per microbatch, lengths increasing "
              "(odc-train --calibrate-cost prints them)"),
      tunable("data.cost_a", K::number, "0.0",
              "quadratic cost model: coefficient of s^2 (odc-train --calibrate-cost fits it)", Range::at_least(0)),
      tunable("data.cost_b", K::number, "1.0", "quadratic cost model: coefficient of s", Range::at_least(0)),
      tunable("data.cost_c", K::number, "0.0",
              "any cost model: the fixed cost of one microbatch, in the cost's units (the reference's fit's c); the "
              "planners weigh it when they choose microbatch counts and splits",
              Range::at_least(0)),
      tunable("data.shuffle", K::boolean, "true",
              "draw minibatches from a seeded shuffle of the data, reshuffled every epoch (false: in file order)"),
      tunable("data.seed", K::integer, "0", "seed of the data order (odc-sim: also of its synthetic lengths)"),
      tunable("data.extra_fields", K::string, "error",
              "a record field its data.format does not define (tokens: input_ids, loss_mask, labels, "
              "attention_mask; chat: messages, or prompt + completion, or text; text: text): error (names it "
              "and its file:line; a typo such as loss_msk would otherwise train on every token) or ignore",
              {"error", "ignore"}),
  };
}

TunableSpec data_tunable(const std::string& path) {
  auto specs = data_tunables();
  const auto it = std::find_if(specs.begin(), specs.end(), [&](const TunableSpec& spec) { return spec.path == path; });
  ODC_CHECK(it != specs.end(), "'{}' is not one of the shared data tunables", path);
  return std::move(*it);
}

CostModel measured_cost_model(const std::string& points) {
  if (points.empty()) fail("data.cost_model = measured needs data.cost_points = LENGTH:SECONDS,... (odc-train --calibrate-cost)");
  std::vector<std::int64_t> lengths;
  std::vector<double> seconds;
  std::size_t begin = 0;
  std::size_t number = 0;
  while (begin <= points.size()) {
    ++number;
    const std::size_t end = std::min(points.find(',', begin), points.size());
    const std::string item = points.substr(begin, end - begin);
    const std::size_t colon = item.find(':');
    bool ok = colon != std::string::npos;
    long long length = 0;
    double time = 0.0;
    if (ok) {
      try {
        std::size_t used_length = 0, used_seconds = 0;
        length = std::stoll(item.substr(0, colon), &used_length);
        time = std::stod(item.substr(colon + 1), &used_seconds);
        ok = used_length == colon && used_seconds == item.size() - colon - 1;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      fail("data.cost_points: item {} '{}' is not LENGTH:SECONDS", number, item);
    }
    lengths.push_back(length);
    seconds.push_back(time);
    begin = end + 1;
  }
  try {
    return CostModel::measured(lengths, seconds);
  } catch (const Error& e) {
    fail("data.cost_points: {}", e.what());
  }
}

CostModel cost_model(const Config& config, double linear_flops_per_token, double attention_flops_per_pair) {
  const std::string kind = config.get_string("data.cost_model");
  CostModel model;
  if (kind == "linear") {
    model = CostModel::linear();
  } else if (kind == "quadratic") {
    model = CostModel::quadratic(config.get_double("data.cost_a"), config.get_double("data.cost_b"));
  } else if (kind == "measured") {
    model = measured_cost_model(config.get_string("data.cost_points"));
  } else {
    model = CostModel::flops(linear_flops_per_token, attention_flops_per_pair);
  }
  model.per_microbatch = config.get_double("data.cost_c");
  return model;
}

std::int64_t token_cap(const Config& config, std::int64_t longest, std::int64_t auto_cap) {
  if (config.get_int_word("data.max_tokens_per_microbatch")) {
    if (auto_cap <= 0) {
      fail("data.max_tokens_per_microbatch: auto is resolved by odc-train's memory plan, which this program does not "
           "have: set a number of tokens");
    }
    return auto_cap;
  }
  const std::int64_t cap = config.get_int("data.max_tokens_per_microbatch");
  if (cap > 0) return cap;
  return static_cast<std::int64_t>(std::floor(static_cast<double>(longest) * config.get_double("data.packing_ratio")));
}

}  // namespace odc::data

#include "odc/data/data_config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "odc/core/error.h"
#include "odc/data/data_keys.h"

namespace odc::data {

std::vector<TunableSpec> data_tunables() {
  return {
      keys::data_max_tokens_per_microbatch.spec(), keys::data_packing_ratio.spec(), keys::data_cost_model.spec(),
      keys::data_cost_points.spec(),  keys::data_cost_a.spec(),        keys::data_cost_b.spec(),
      keys::data_cost_c.spec(),       keys::data_shuffle.spec(),       keys::data_seed.spec(),
      keys::data_extra_fields.spec(),
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
  const std::string kind = keys::data_cost_model.read(config);
  CostModel model;
  if (kind == "linear") {
    model = CostModel::linear();
  } else if (kind == "quadratic") {
    model = CostModel::quadratic(keys::data_cost_a.read(config), keys::data_cost_b.read(config));
  } else if (kind == "measured") {
    model = measured_cost_model(keys::data_cost_points.read(config));
  } else {
    model = CostModel::flops(linear_flops_per_token, attention_flops_per_pair);
  }
  model.per_microbatch = keys::data_cost_c.read(config);
  return model;
}

std::int64_t token_cap(const Config& config, std::int64_t longest, std::int64_t auto_cap) {
  if (keys::data_max_tokens_per_microbatch.read_word(config)) {
    if (auto_cap <= 0) {
      fail("data.max_tokens_per_microbatch: auto is resolved by odc-train's memory plan, which this program does not "
           "have: set a number of tokens");
    }
    return auto_cap;
  }
  const std::int64_t cap = keys::data_max_tokens_per_microbatch.read(config);
  if (cap > 0) return cap;
  return static_cast<std::int64_t>(std::floor(static_cast<double>(longest) * keys::data_packing_ratio.read(config)));
}

}  // namespace odc::data

#include "odc/backend/op_profile.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::backend {

double OpCategory::work() const {
  switch (measure()) {
    case OpMeasure::flops: return flops;
    case OpMeasure::bytes: return bytes;
    case OpMeasure::calls: return static_cast<double>(calls);
  }
  return 0.0;
}

OpCategory& OpProfile::at(std::string_view name, std::string_view role) {
  for (auto& op : ops) {
    if (op.name == name && op.role == role) return op;
  }
  ops.push_back({std::string(name), std::string(role), 0, 0.0, 0.0, 0.0});
  return ops.back();
}

const OpCategory* OpProfile::find(std::string_view name, std::string_view role) const {
  for (const auto& op : ops) {
    if (op.name == name && op.role == role) return &op;
  }
  return nullptr;
}

double OpProfile::seconds() const {
  double s = 0.0;
  for (const auto& op : ops) s += op.seconds;
  return s;
}

std::vector<OpCategory> OpProfile::qkv_sums() const {
  std::vector<OpCategory> sums;
  for (const auto& op : ops) {
    if (op.role != "q") continue;
    const OpCategory* k = find(op.name, "k");
    const OpCategory* v = find(op.name, "v");
    if (k == nullptr || v == nullptr) continue;
    sums.push_back({op.name, "qkv", op.calls + k->calls + v->calls, op.seconds + k->seconds + v->seconds,
                    op.flops + k->flops + v->flops, op.bytes + k->bytes + v->bytes});
  }
  return sums;
}

nlohmann::json ProfileDocument::to_json() const {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : profile.ops) {
    ops.push_back({{"name", op.name}, {"role", op.role}, {"measure", std::string(measure_name(op.measure()))},
                   {"calls", op.calls}, {"seconds", op.seconds}, {"flops", op.flops}, {"bytes", op.bytes}});
  }
  nlohmann::json sums = nlohmann::json::array();
  for (const auto& s : profile.qkv_sums()) {
    sums.push_back({{"name", s.name}, {"role", s.role}, {"of", {"q", "k", "v"}}, {"calls", s.calls},
                    {"seconds", s.seconds}, {"flops", s.flops}});
  }
  return {{"bench", "op_profile"},        {"shape", shape},
          {"tokens", tokens},             {"sequences", sequences},
          {"layers", layers},             {"hidden", hidden},
          {"q_dim", q_dim},               {"kv_dim", kv_dim},
          {"intermediate", intermediate}, {"vocab", vocab},
          {"recompute", recompute},       {"attention", attention},
          {"device", device},             {"device_description", device_description},
          {"step_seconds", step_seconds}, {"op_seconds", profile.seconds()},
          {"ops", ops},                   {"sums", sums}};
}

namespace {

// Field access that names the file and the field in its errors.
struct Fields {
  const nlohmann::json& json;
  std::string_view file;
  std::string where;  // "" or "ops[3]."

  const nlohmann::json& get(const char* key) const {
    if (!json.is_object() || !json.contains(key)) {
      fail("device profile {}: the field '{}{}' is missing (a profile is what gpu_model_throughput --profile writes)",
           file, where, key);
    }
    return json.at(key);
  }
  std::string text(const char* key) const {
    const auto& v = get(key);
    if (!v.is_string()) fail("device profile {}: the field '{}{}' must be a string, found {}", file, where, key, v.dump());
    return v.get<std::string>();
  }
  double number(const char* key) const {
    const auto& v = get(key);
    if (!v.is_number()) fail("device profile {}: the field '{}{}' must be a number, found {}", file, where, key, v.dump());
    const double x = v.get<double>();
    if (!(x >= 0)) fail("device profile {}: the field '{}{}' must be >= 0, found {}", file, where, key, v.dump());
    return x;
  }
  std::int64_t integer(const char* key) const {
    const double x = number(key);
    if (x != static_cast<double>(static_cast<std::int64_t>(x))) {
      fail("device profile {}: the field '{}{}' must be a whole number, found {}", file, where, key, get(key).dump());
    }
    return static_cast<std::int64_t>(x);
  }
};

}  // namespace

ProfileDocument ProfileDocument::from_json(const nlohmann::json& json, std::string_view file) {
  const Fields f{json, file, ""};
  if (f.text("bench") != "op_profile") {
    fail("device profile {}: the field 'bench' is '{}', expected 'op_profile' (the file gpu_model_throughput "
         "--profile writes)", file, f.text("bench"));
  }
  ProfileDocument d;
  d.shape = f.text("shape");
  d.tokens = f.integer("tokens");
  d.sequences = f.integer("sequences");
  d.layers = f.integer("layers");
  d.hidden = f.integer("hidden");
  d.q_dim = f.integer("q_dim");
  d.kv_dim = f.integer("kv_dim");
  d.intermediate = f.integer("intermediate");
  d.vocab = f.integer("vocab");
  d.recompute = f.text("recompute");
  d.attention = f.text("attention");
  d.device = f.text("device");
  if (d.device != "cuda" && d.device != "cpu") {
    fail("device profile {}: the field 'device' is '{}', expected cuda or cpu", file, d.device);
  }
  d.device_description = f.text("device_description");
  d.step_seconds = f.number("step_seconds");
  const auto& ops = f.get("ops");
  if (!ops.is_array() || ops.empty()) fail("device profile {}: the field 'ops' must be a non-empty array", file);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Fields op{ops[i], file, fmt::format("ops[{}].", i)};
    const std::string name = op.text("name");
    try {
      (void)measure_of(name);
    } catch (const Error&) {
      fail("device profile {}: the field 'ops[{}].name' is '{}', which is no backend op", file, i, name);
    }
    OpCategory& c = d.profile.at(name, op.text("role"));
    if (c.calls > 0) fail("device profile {}: ops[{}] repeats the category '{}'", file, i, c.label());
    c.calls = op.integer("calls");
    c.seconds = op.number("seconds");
    c.flops = op.number("flops");
    c.bytes = op.number("bytes");
    if (c.calls == 0) fail("device profile {}: the field 'ops[{}].calls' must be at least 1, found 0", file, i);
  }
  return d;
}

std::string ProfileDocument::table() const {
  const double step = step_seconds;
  const double ops_s = profile.seconds();
  std::string out = fmt::format(
      "op profile: {}, {} tokens in {} sequence(s), recompute {}, {}; attention: {}\n"
      "step {:.3f} ms (wall), ops {:.3f} ms ({:.1f}%), outside ops {:.3f} ms (the host between ops)\n",
      shape, tokens, sequences, recompute, device_description, attention, step * 1e3, ops_s * 1e3,
      step > 0 ? 100.0 * ops_s / step : 0.0, (step - ops_s) * 1e3);
  out += fmt::format("{:<34} {:>7} {:>11} {:>7} {:>14}\n", "category", "calls", "ms/step", "share", "rate");
  const auto row = [&](const OpCategory& c, std::string_view label) {
    std::string rate;
    if (c.seconds > 0 && c.work() > 0) {
      const double r = c.work() / c.seconds;
      switch (c.measure()) {
        case OpMeasure::flops: rate = r >= 1e12 ? fmt::format("{:.1f} TFLOP/s", r / 1e12) : fmt::format("{:.1f} GFLOP/s", r / 1e9); break;
        case OpMeasure::bytes: rate = fmt::format("{:.1f} GB/s", r / 1e9); break;
        case OpMeasure::calls: rate = fmt::format("{:.1f} us/call", 1e6 / r); break;
      }
    }
    out += fmt::format("{:<34} {:>7} {:>11.4f} {:>6.1f}% {:>14}\n", label, c.calls, c.seconds * 1e3,
                       step > 0 ? 100.0 * c.seconds / step : 0.0, rate);
  };
  std::vector<const OpCategory*> sorted;
  for (const auto& op : profile.ops) sorted.push_back(&op);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->seconds > b->seconds; });
  for (const auto* c : sorted) row(*c, c->label());
  for (const auto& s : profile.qkv_sums()) row(s, s.name + " qkv (= q + k + v)");
  return out;
}

ProfileDocument read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("device profile {}: cannot be read", path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("device profile {}: not JSON ({})", path, e.what());
  }
  return ProfileDocument::from_json(json, path);
}

}  // namespace odc::backend

#include "odc/sim/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"

namespace odc::sim {

namespace {

// Solves the k x k system a x = b (k <= 3) by Gaussian elimination with partial pivoting; false
// when a pivot is negligible next to the matrix (the chosen columns are collinear).
bool solve_small(std::array<std::array<double, 3>, 3> a, std::array<double, 3> b, int k, std::array<double, 3>& x) {
  double scale = 0.0;
  for (int i = 0; i < k; ++i) scale = std::max(scale, std::abs(a[i][i]));
  if (scale <= 0.0) return false;
  for (int col = 0; col < k; ++col) {
    int pivot = col;
    for (int row = col + 1; row < k; ++row) {
      if (std::abs(a[row][col]) > std::abs(a[pivot][col])) pivot = row;
    }
    if (std::abs(a[pivot][col]) < 1e-10 * scale) return false;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (int row = col + 1; row < k; ++row) {
      const double factor = a[row][col] / a[col][col];
      for (int j = col; j < k; ++j) a[row][j] -= factor * a[col][j];
      b[row] -= factor * b[col];
    }
  }
  for (int row = k - 1; row >= 0; --row) {
    double sum = b[row];
    for (int j = row + 1; j < k; ++j) sum -= a[row][j] * x[j];
    x[row] = sum / a[row][row];
  }
  return true;
}

// The trainer's tracer stores every arg as a double, so an integer may arrive as 3.0.
int int_arg(const nlohmann::json& args, const char* key, const std::string& where) {
  const bool present = args.contains(key) && args.at(key).is_number();
  const double value = present ? args.at(key).get<double>() : 0.0;
  if (!present || value != std::floor(value) || std::abs(value) > 1e9) {
    fail("{}: expected an integer args.{}, found {}", where, key, args.contains(key) ? args.at(key).dump() : "nothing");
  }
  return static_cast<int>(value);
}

double number_arg(const nlohmann::json& args, const char* key, const std::string& where) {
  if (!args.contains(key) || !args.at(key).is_number()) {
    fail("{}: expected a number args.{}, found {}", where, key, args.contains(key) ? args.at(key).dump() : "nothing");
  }
  const double value = args.at(key).get<double>();
  if (!std::isfinite(value) || value < 0.0) fail("{}: args.{} must be a finite number >= 0, found {}", where, key, value);
  return value;
}

double event_number(const nlohmann::json& event, const char* key, const std::string& where) {
  if (!event.contains(key) || !event.at(key).is_number()) {
    fail("{}: expected a number \"{}\" (microseconds), found {}", where, key,
         event.contains(key) ? event.at(key).dump() : "nothing");
  }
  const double value = event.at(key).get<double>();
  if (!std::isfinite(value) || value < 0.0) fail("{}: \"{}\" must be a finite number >= 0, found {}", where, key, value);
  return value;
}

struct Samples {
  std::vector<double> tokens, pairs, seconds;
};

std::string unit_label(int unit, int layers) {
  if (unit == 0) return "embedding";
  if (unit == layers + 1) return "head";
  return fmt::format("layer.{}", unit - 1);
}

}  // namespace

StepTime fit_step_time(const std::vector<double>& tokens, const std::vector<double>& pairs,
                       const std::vector<double>& seconds, const std::string& where) {
  const std::size_t n = seconds.size();
  if (tokens.size() != n || pairs.size() != n) {
    fail("{}: {} token counts, {} pair counts and {} timings; expected one of each per sample", where,
         tokens.size(), pairs.size(), n);
  }
  if (n == 0) fail("{}: no samples to fit", where);
  // Columns scaled to a maximum of 1 so the normal equations stay well conditioned (pairs of a
  // 64K-token sequence are 2e9).
  const double token_scale = *std::max_element(tokens.begin(), tokens.end());
  const double pair_scale = *std::max_element(pairs.begin(), pairs.end());
  std::vector<std::array<double, 3>> rows(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(seconds[i]) || seconds[i] < 0.0) fail("{}: sample {} has time {}", where, i, seconds[i]);
    rows[i] = {1.0, token_scale > 0.0 ? tokens[i] / token_scale : 0.0, pair_scale > 0.0 ? pairs[i] / pair_scale : 0.0};
  }
  const std::array<bool, 3> usable = {true, token_scale > 0.0, pair_scale > 0.0};
  std::array<double, 3> best{0.0, 0.0, 0.0};
  double best_error = std::numeric_limits<double>::infinity();
  int best_size = 4;
  // Exact non-negative least squares for 3 columns: the optimum is the unconstrained fit on some
  // subset of the columns with all its coefficients >= 0; try every subset.
  for (int mask = 1; mask < 8; ++mask) {
    std::array<int, 3> cols{};
    int k = 0;
    bool ok = true;
    for (int j = 0; j < 3; ++j) {
      if (!(mask & (1 << j))) continue;
      ok = ok && usable[static_cast<std::size_t>(j)];
      cols[static_cast<std::size_t>(k++)] = j;
    }
    if (!ok) continue;
    std::array<std::array<double, 3>, 3> ata{};
    std::array<double, 3> aty{};
    for (std::size_t i = 0; i < n; ++i) {
      for (int r = 0; r < k; ++r) {
        aty[r] += rows[i][cols[r]] * seconds[i];
        for (int c = 0; c < k; ++c) ata[r][c] += rows[i][cols[r]] * rows[i][cols[c]];
      }
    }
    std::array<double, 3> x{};
    if (!solve_small(ata, aty, k, x)) continue;
    if (std::any_of(x.begin(), x.begin() + k, [](double v) { return v < 0.0; })) continue;
    std::array<double, 3> coef{0.0, 0.0, 0.0};
    for (int r = 0; r < k; ++r) coef[cols[r]] = x[r];
    double error = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double r = coef[0] * rows[i][0] + coef[1] * rows[i][1] + coef[2] * rows[i][2] - seconds[i];
      error += r * r;
    }
    // Prefer the smaller model when a larger one is no better (up to rounding).
    if (error < best_error * (1.0 - 1e-12) || (error <= best_error * (1.0 + 1e-12) && k < best_size)) {
      best_error = error;
      best = coef;
      best_size = k;
    }
  }
  if (!std::isfinite(best_error)) fail("{}: no non-negative fit of t = c0 + c1*tokens + c2*pairs exists", where);
  return StepTime{best[0], token_scale > 0.0 ? best[1] / token_scale : 0.0,
                  pair_scale > 0.0 ? best[2] / pair_scale : 0.0, 0.0};
}

Calibration calibrate_from_trace(const nlohmann::json& trace, const std::string& source) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace.at("traceEvents").is_array()) {
    fail("{}: expected a Chrome trace object with a \"traceEvents\" array (written by odc-train's "
         "train.trace_file)", source);
  }
  if (!trace.contains("otherData") || !trace.at("otherData").is_object()) {
    fail("{}: expected an \"otherData\" object with world_size and model", source);
  }
  const auto& other = trace.at("otherData");
  Calibration out;
  if (!other.contains("model")) fail("{}: otherData has no \"model\" (the model's config.json fields)", source);
  out.model = model::LlamaConfig::from_json(other.at("model"), source + " otherData.model", false);
  out.summary.world_size = int_arg(other, "world_size", source + " otherData");
  if (out.summary.world_size < 1) fail("{}: otherData.world_size must be >= 1, found {}", source, out.summary.world_size);
  out.summary.comm = other.value("comm", std::string());
  out.summary.balance = other.value("balance", std::string());
  const int layers = out.model.num_hidden_layers;

  std::vector<Samples> forward(static_cast<std::size_t>(layers) + 1), backward(static_cast<std::size_t>(layers) + 1);
  Samples head;
  std::vector<double> optimizer;
  std::map<int, double> step_first, step_optimizer_end;
  std::set<int> steps;
  double gather_wait = 0.0, push_wait = 0.0, barrier = 0.0, compute = 0.0;
  const auto& events = trace.at("traceEvents");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& event = events[i];
    if (!event.is_object()) fail("{}: traceEvents[{}] is not an object", source, i);
    if (event.value("ph", std::string()) != "X") continue;  // metadata and other phases
    const std::string name = event.value("name", std::string());
    const std::string where = fmt::format("{}: traceEvents[{}] (\"{}\")", source, i, name);
    const std::string category = event.value("cat", std::string());
    const double ts = event_number(event, "ts", where) * 1e-6;
    const double seconds = event_number(event, "dur", where) * 1e-6;
    const auto args = event.value("args", nlohmann::json::object());
    if (args.contains("step")) {
      const int step = int_arg(args, "step", where);
      auto [it, inserted] = step_first.emplace(step, ts);
      if (!inserted) it->second = std::min(it->second, ts);
    }
    if (category == "forward" || category == "backward" || category == "head") {
      Samples* samples = &head;
      if (category != "head") {
        const int unit = int_arg(args, "unit", where);
        if (unit < 0 || unit > layers) {
          fail("{}: unit {} is out of range (units 0..{} for a model with {} layers)", where, unit, layers, layers);
        }
        samples = &(category == "forward" ? forward : backward)[static_cast<std::size_t>(unit)];
      }
      samples->tokens.push_back(number_arg(args, "tokens", where));
      samples->pairs.push_back(number_arg(args, "pairs", where));
      samples->seconds.push_back(seconds);
      compute += seconds;
    } else if (category == "wait") {
      // "gather wait X", "push wait X", and "barrier wait X" (collective pushes drained at the end).
      (name.starts_with("push") ? push_wait : name.starts_with("barrier") ? barrier : gather_wait) += seconds;
    } else if (category == "barrier") {
      barrier += seconds;
    } else if (category == "optimizer") {
      optimizer.push_back(seconds);
      const int step = int_arg(args, "step", where);
      steps.insert(step);
      auto [it, inserted] = step_optimizer_end.emplace(step, ts + seconds);
      if (!inserted) it->second = std::max(it->second, ts + seconds);
    }
  }
  if (optimizer.empty()) fail("{}: no \"optimizer\" events; a calibration trace needs at least one full step", source);

  auto fit = [&](const Samples& samples, const char* phase, int unit) {
    const std::string what = fmt::format("{}: {} of unit {} ({})", source, phase, unit, unit_label(unit, layers));
    if (samples.seconds.empty()) fail("{}: no events in the trace", what);
    StepTime time = fit_step_time(samples.tokens, samples.pairs, samples.seconds, what);
    out.fit_notes.push_back(fmt::format("{} {}: {} samples, t = {:.3g} s + {:.3g} s/token + {:.3g} s/pair", phase,
                                        unit_label(unit, layers), samples.seconds.size(), time.c0, time.c1, time.c2));
    return time;
  };
  for (int u = 0; u <= layers; ++u) out.compute.forward.push_back(fit(forward[static_cast<std::size_t>(u)], "forward", u));
  out.compute.head = fit(head, "head", layers + 1);
  for (int u = 0; u <= layers; ++u) out.compute.backward.push_back(fit(backward[static_cast<std::size_t>(u)], "backward", u));

  auto& summary = out.summary;
  double sum_optimizer = 0.0;
  for (const double t : optimizer) sum_optimizer += t;
  summary.optimizer_s = sum_optimizer / static_cast<double>(optimizer.size());
  out.compute.optimizer_s = summary.optimizer_s;
  summary.steps = static_cast<int>(steps.size());
  double total_minibatch = 0.0;
  for (const auto& [step, end] : step_optimizer_end) total_minibatch += end - step_first.at(step);
  summary.minibatch_s = total_minibatch / summary.steps;
  const double per_rank_step = static_cast<double>(summary.steps) * summary.world_size;
  summary.gather_wait_s = gather_wait / per_rank_step;
  summary.push_wait_s = push_wait / per_rank_step;
  summary.barrier_s = barrier / per_rank_step;
  summary.compute_s = compute / per_rank_step;
  out.compute.description = fmt::format("calibrated from {} ({} rank(s), {} step(s))", source, summary.world_size,
                                        summary.steps);
  return out;
}

Calibration calibrate_from_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("sim.calibration: cannot open trace file '{}'", path);
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("sim.calibration: '{}' is not valid JSON: {}", path, e.what());
  }
  return calibrate_from_trace(trace, path);
}

double rescaled_optimizer(const Calibration& calibration, int devices) {
  if (devices < 1) fail("sim.devices must be at least 1, found {}", devices);
  return calibration.compute.optimizer_s * calibration.summary.world_size / devices;
}

void check_same_shape(const model::LlamaConfig& traced, const model::LlamaConfig& simulated, const std::string& source) {
  const ShapeDifference difference = shape_difference(traced, simulated);
  if (!difference.none()) {
    fail("{}: the trace was recorded with {} = {} but the simulated model.config has {}; calibrated per-unit "
         "times only describe the traced model (simulate that model, or use a named sim.device)",
         source, difference.field, difference.a, difference.b);
  }
}

}  // namespace odc::sim

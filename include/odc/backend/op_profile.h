#pragma once
// A per-op device profile: the time, calls, FLOPs and bytes of a step's Backend ops by category
// (ProfilingBackend records it, backend/op_profiler.h), and the document that carries it from
// gpu_model_throughput --profile to whoever reads it (the step estimate, train/plan/step_estimate.h;
// people, through table()).
//
// The document, one JSON object (docs/performance.md, "Per-op profile"):
//   {"bench":"op_profile","shape":...,"tokens":...,"sequences":...,"layers":...,"hidden":...,
//    "q_dim":...,"kv_dim":...,"intermediate":...,"vocab":...,"recompute":...,"attention":...,
//    "device":"cuda"|"cpu","device_description":...,"step_seconds":...,"op_seconds":...,
//    "ops":[{"name":...,"role":...,"measure":"flops"|"bytes"|"calls","calls":...,"seconds":...,
//            "flops":...,"bytes":...}, ...],
//    "sums":[{"name":...,"role":"qkv","of":["q","k","v"],"calls":...,"seconds":...,"flops":...}]}
// `ops` are disjoint (their seconds add up to op_seconds <= step_seconds); `sums` are derived
// from them (q + k + v per GEMM op: what one fused QKV projection would replace).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/backend/op_costs.h"

namespace odc::backend {

struct OpCategory {
  std::string name;  // the Backend op ("linear_backward", "weights", ...)
  // GEMMs: the role a classifier gave the call ("q", "o_proj", "lm_head", ...; "" without one);
  // weights(): "cast" (a compute copy made) or "reuse" (a live or kept copy handed out again);
  // every other op: "".
  std::string role;
  std::int64_t calls = 0;
  double seconds = 0.0;
  double flops = 0.0;
  double bytes = 0.0;

  OpMeasure measure() const { return measure_of(name); }
  // What the category's time is proportional to: its FLOPs, bytes or calls (measure()).
  double work() const;
  std::string label() const { return role.empty() ? name : name + " " + role; }
};

struct OpProfile {
  std::vector<OpCategory> ops;  // in the order of their first call

  // The category (name, role), added when absent.
  OpCategory& at(std::string_view name, std::string_view role);
  const OpCategory* find(std::string_view name, std::string_view role) const;
  double seconds() const;  // of every op
  // Per GEMM op with q, k and v roles: their sum, as role "qkv".
  std::vector<OpCategory> qkv_sums() const;
};

// What gpu_model_throughput --profile writes: the run's shape, the profiled step's wall seconds
// and its ops.
struct ProfileDocument {
  std::string shape;  // for people, e.g. "L16 d2048 ff8192 h32/8x64 v128256 tied 8x1024"
  std::int64_t tokens = 0;
  std::int64_t sequences = 0;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t q_dim = 0;
  std::int64_t kv_dim = 0;
  std::int64_t intermediate = 0;
  std::int64_t vocab = 0;
  std::string recompute;           // none | selective | full
  std::string attention;           // the attention kernels (Backend::select_attention's text)
  std::string device;              // the device kind: "cuda" | "cpu"
  std::string device_description;  // Backend::describe()
  double step_seconds = 0.0;       // the profiled step, host wall clock
  OpProfile profile;

  nlohmann::json to_json() const;
  // odc::Error naming `file` and the field (e.g. "ops[3].seconds") when one is missing or of the
  // wrong type, when "bench" is not "op_profile", or when a number is negative.
  static ProfileDocument from_json(const nlohmann::json& json, std::string_view file);
  // For people: one row per category (most time first; calls, ms per step, share of the step,
  // the achieved TFLOP/s of the FLOP-measured ones, GB/s of the byte-measured ones), the qkv sums,
  // and the time outside ops (host gaps: the step's wall time less its ops' time).
  std::string table() const;
};

// The document in `path`: odc::Error naming the file when it cannot be read or is not JSON, and
// ProfileDocument::from_json's errors.
ProfileDocument read_profile(const std::string& path);

}  // namespace odc::backend

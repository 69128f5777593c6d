#include "odc/sim/sim_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "odc/core/device_specs.h"
#include "odc/core/error.h"
#include "odc/sim/calibration.h"
#include "odc/train/config_schema.h"

namespace odc::sim {

namespace {

TunableSpec spec(std::string path, ValueKind kind, std::string default_value, std::string doc,
                 std::vector<std::string> choices = {}) {
  return {std::move(path), kind, std::move(default_value), std::move(doc), std::move(choices), false};
}

constexpr const char* kAllMethods = "collective+local_sort,collective+lb_micro,odc+local_sort,odc+lb_micro,odc+lb_mini";

}  // namespace

std::vector<TunableSpec> sim_tunables() {
  using K = ValueKind;
  return {
      spec("model.config", K::map,
           "{vocab_size: 151936, hidden_size: 1536, intermediate_size: 8960, num_hidden_layers: 28, "
           "num_attention_heads: 12, num_key_value_heads: 2, rms_norm_eps: 1.0e-6, rope_theta: 10000.0, "
           "max_position_embeddings: 131072, tie_word_embeddings: false, attention_bias: true}",
           "Hugging Face config.json fields of the simulated model (merged key by key over this default: "
           "give every shape field); default DeepSeek-R1-Distill-Qwen-1.5B"),
      // data
      spec("data.lengths", K::string, "\"\"",
           "sequence lengths to simulate: a text file with one length per line ('#' comments), or a dataset "
           "(see data.format); empty = the synthetic distribution below"),
      spec("data.format", K::string, "lengths",
           "format of data.lengths: lengths (a text file, one length per line), tokens (pre-tokenized JSONL), bin (odc-data "
           "convert output)",
           {"lengths", "tokens", "bin"}),
      spec("data.distribution", K::string, "lognormal", "synthetic length distribution (when data.lengths is empty)",
           {"lognormal"}),
      spec("data.mean_length", K::number, "18000",
           "synthetic: mean of the unclipped log-normal (the clipped mean is reported); the default with "
           "sigma 1.0 clipped to [256, 65536] is a LongAlign-like stand-in with a mean of about 16.5K"),
      spec("data.sigma", K::number, "1.0", "synthetic: log-space standard deviation (larger = longer tail)"),
      spec("data.min_length", K::integer, "256", "synthetic: shortest sequence"),
      spec("data.max_length", K::integer, "65536",
           "longest sequence: synthetic lengths are clipped to it, lengths read from data.lengths are truncated "
           "to it (0 = keep file lengths as they are)"),
      spec("data.num_sequences", K::integer, "0",
           "size of the synthetic pool the sampler draws from; 0 = exactly the sequences of the simulated "
           "minibatches (sim.minibatches x minibatch_size x sim.devices)"),
      spec("data.shuffle", K::boolean, "true", "draw minibatches from a seeded shuffle of the lengths (as odc-train)"),
      spec("data.seed", K::integer, "0", "seed of the synthetic lengths and of the shuffle"),
      spec("data.minibatch_size", K::integer, "4", "sequences per device per optimizer step"),
      spec("data.max_tokens_per_microbatch", K::integer, "0",
           "token cap of a packed microbatch; 0 = the longest length times packing_ratio"),
      spec("data.packing_ratio", K::number, "1.0", "multiplies the default token cap (ignored when a cap is set)"),
      spec("data.cost_model", K::string, "flops",
           "per-sequence cost the planners balance: linear, quadratic (cost_a*s^2 + cost_b*s), flops (from the "
           "model shape, as odc-train)",
           {"linear", "quadratic", "flops"}),
      spec("data.cost_a", K::number, "0.0", "quadratic cost model: coefficient of s^2"),
      spec("data.cost_b", K::number, "1.0", "quadratic cost model: coefficient of s"),
      // sim
      spec("sim.label", K::string, "\"\"", "name of this setting in the output (empty = the config file's name)"),
      spec("sim.devices", K::integer, "8", "simulated devices (data-parallel ranks)"),
      spec("sim.devices_per_node", K::integer, "0",
           "devices per node; 0 = the device's (8 for GPUs; all devices when calibrated)"),
      spec("sim.device", K::string, "a100-80gb",
           "accelerator whose datasheet numbers drive compute (a100-80gb, h100-sxm, h200), or calibrated "
           "(per-unit times fitted from sim.calibration)"),
      spec("sim.calibration", K::string, "\"\"",
           "Chrome trace written by odc-train (train.trace_file); required when sim.device = calibrated"),
      spec("sim.minibatches", K::integer, "50", "global minibatches (optimizer steps) to simulate per method"),
      spec("sim.skip_minibatches", K::integer, "0",
           "minibatches drawn and discarded first (to match a measured run that excludes warm-up steps)"),
      spec("sim.methods", K::string, kAllMethods,
           "comma-separated COMM+BALANCE schedules to simulate (comm: collective, odc; balance: local_sort, "
           "lb_micro, lb_mini — lb_mini with odc only)"),
      spec("sim.baseline", K::string, "collective+lb_micro", "the schedule speedups are measured against"),
      spec("sim.param_bytes", K::number, "2", "bytes per gathered parameter element (2 = bf16 on GPUs, 4 on the CPU)"),
      spec("sim.odc_param_bytes", K::number, "0",
           "bytes per element ODC gathers; 0 = sim.param_bytes (4 models the paper's reference code, which "
           "gathers the fp32 master shards)"),
      spec("sim.grad_bytes", K::number, "4", "bytes per gradient element reduced or pushed (fp32)"),
      spec("sim.gradient_checkpointing", K::boolean, "true",
           "named devices: backward recomputes each layer's forward (3x forward instead of 2x)"),
      spec("sim.matmul_efficiency", K::number, "0.6", "named devices: fraction of peak bf16 FLOP/s of the linear layers"),
      spec("sim.attention_efficiency", K::number, "0.45", "named devices: fraction of peak bf16 FLOP/s of attention"),
      spec("sim.optimizer_bytes_per_element", K::number, "32",
           "named devices: memory traffic of the AdamW step per owned element"),
      spec("sim.intra_node_gbps", K::number, "0",
           "per-device bandwidth to the node's switch, Gb/s per direction; 0 = the device's NVLink (2400 on "
           "A100), or 80 when calibrated (shared-memory copies on a CPU host)"),
      spec("sim.inter_node_gbps", K::number, "800", "per-node network bandwidth, Gb/s per direction (paper: 800 RoCE)"),
      spec("sim.odc_inter_node_efficiency", K::number, "1.0",
           "per-byte efficiency of ODC's point-to-point traffic on the node's network link relative to a ring "
           "collective (assumption; 1 = as efficient: the flat pattern alone already moves devices_per_node x more "
           "bytes across nodes, 4.3x a ring's time at 16 devices)"),
      spec("sim.latency_us", K::number, "20", "fixed cost of every gather, reduction and barrier, microseconds"),
      spec("sim.prefetch_depth", K::integer, "1",
           "gathers are issued this many steps (units) ahead of their use; 0 = no overlap of gathers with compute"),
      spec("sim.max_outstanding_reductions", K::integer, "3",
           "gradient reductions/pushes in flight per device before backward waits"),
  };
}

Config load_sim_config(const std::string& config_file, const std::vector<std::string>& assignments) {
  Config config(sim_tunables());
  if (!config_file.empty()) config.load_yaml_file(config_file);
  config.apply_environment();
  for (const auto& assignment : assignments) config.apply_assignment(assignment);
  config.validate();
  return config;
}

std::string Method::name() const { return std::string(comm_name(comm)) + "+" + data::balance_name(balance); }

Method parse_method(const std::string& text, const std::string& key) {
  const auto plus = text.find('+');
  auto bad = [&]() {
    fail("{}: '{}' is not a schedule; expected COMM+BALANCE, one of {}", key, text, kAllMethods);
  };
  if (plus == std::string::npos) bad();
  const std::string comm = text.substr(0, plus);
  const std::string balance = text.substr(plus + 1);
  if (comm != "odc" && comm != "collective") bad();
  if (balance != "local_sort" && balance != "lb_micro" && balance != "lb_mini") bad();
  Method method{parse_comm(comm), data::parse_balance(balance)};
  if (method.comm == CommKind::collective && method.balance == data::Balance::lb_mini) {
    fail("{}: collective+lb_mini cannot run: LB-Mini gives devices different numbers of microbatches, which "
         "collectives cannot (use odc+lb_mini, or collective+lb_micro)", key);
  }
  return method;
}

std::vector<Method> parse_methods(const std::string& list, const std::string& key) {
  std::vector<Method> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      const Method method = parse_method(item, key);
      if (std::find(out.begin(), out.end(), method) != out.end()) fail("{}: '{}' is listed twice", key, item);
      out.push_back(method);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) fail("{}: no schedules listed (e.g. {})", key, kAllMethods);
  return out;
}

std::vector<Method> all_methods() { return parse_methods(kAllMethods, "all methods"); }

SimSetup build_setup(const Config& config, const std::string& default_label) {
  SimSetup s;
  s.label = config.get_string("sim.label");
  if (s.label.empty()) s.label = default_label.empty() ? "default" : default_label;
  s.methods = parse_methods(config.get_string("sim.methods"), "sim.methods");
  s.baseline = parse_method(config.get_string("sim.baseline"), "sim.baseline");

  s.devices = static_cast<int>(config.get_int("sim.devices"));
  if (config.get_int("sim.devices") < 1 || config.get_int("sim.devices") > 65536) {
    fail("sim.devices must be in [1, 65536], found {}", config.get_int("sim.devices"));
  }
  s.minibatch_size = config.get_int("data.minibatch_size");
  if (s.minibatch_size < 1) fail("data.minibatch_size must be at least 1, found {}", s.minibatch_size);
  s.minibatches = config.get_int("sim.minibatches");
  if (s.minibatches < 1) fail("sim.minibatches must be at least 1, found {}", s.minibatches);
  s.skip_minibatches = config.get_int("sim.skip_minibatches");
  if (s.skip_minibatches < 0) fail("sim.skip_minibatches must be >= 0, found {}", s.skip_minibatches);
  s.prefetch_depth = static_cast<int>(config.get_int("sim.prefetch_depth"));
  if (s.prefetch_depth < 0 || s.prefetch_depth > 64) fail("sim.prefetch_depth must be in [0, 64], found {}", s.prefetch_depth);
  s.max_outstanding_reductions = static_cast<int>(config.get_int("sim.max_outstanding_reductions"));
  if (s.max_outstanding_reductions < 1) {
    fail("sim.max_outstanding_reductions must be at least 1, found {}", s.max_outstanding_reductions);
  }

  // The model: the calibration trace's, unless the user gave one (then they must agree).
  const std::string device = config.get_string("sim.device");
  const std::string calibration_path = config.get_string("sim.calibration");
  const bool calibrated = device == "calibrated";
  s.model = train::model_config_from(config);
  if (calibrated) {
    if (calibration_path.empty()) {
      fail("sim.device = calibrated needs sim.calibration = PATH of a trace written by odc-train (train.trace_file)");
    }
    const Calibration calibration = calibrate_from_trace_file(calibration_path);
    if (config.source_of("model.config") == "default") {
      s.model = calibration.model;
    } else {
      check_same_shape(calibration.model, s.model, calibration_path);
    }
    s.compute = calibration.compute;
    s.compute.optimizer_s = rescaled_optimizer(calibration, s.devices);
    s.notes = calibration.fit_notes;
    const auto& t = calibration.summary;
    s.measured = fmt::format(
        "the trace measured {:.4g} s per minibatch on {} rank(s) with {}+{} ({:.4g} s computing, {:.4g} s gather "
        "waits, {:.4g} s push waits, {:.4g} s barriers per rank); simulate the same setting (sim.devices, "
        "data.minibatch_size, the dataset's lengths) to compare",
        t.minibatch_s, t.world_size, t.comm, t.balance, t.compute_s, t.gather_wait_s, t.push_wait_s, t.barrier_s);
  } else {
    const DeviceSpec& spec = device_spec(device);
    DeviceComputeOptions options;
    options.matmul_efficiency = config.get_double("sim.matmul_efficiency");
    options.attention_efficiency = config.get_double("sim.attention_efficiency");
    options.param_bytes = config.get_double("sim.param_bytes");
    options.gradient_checkpointing = config.get_bool("sim.gradient_checkpointing");
    options.optimizer_bytes_per_element = config.get_double("sim.optimizer_bytes_per_element");
    options.devices = s.devices;
    s.compute = compute_model_for_device(s.model, spec, options);
  }

  // Links.
  s.link.devices = s.devices;
  const auto per_node = config.get_int("sim.devices_per_node");
  if (per_node < 0) fail("sim.devices_per_node must be >= 0, found {}", per_node);
  const double gbps = 1e9 / 8.0;  // bytes/s per Gb/s
  if (calibrated) {
    s.link.devices_per_node = per_node > 0 ? static_cast<int>(per_node) : s.devices;
    const double intra = config.get_double("sim.intra_node_gbps");
    s.link.intra_bandwidth = (intra > 0.0 ? intra : 80.0) * gbps;
  } else {
    const DeviceSpec& spec = device_spec(device);
    s.link.devices_per_node = per_node > 0 ? static_cast<int>(per_node) : spec.devices_per_node;
    const double intra = config.get_double("sim.intra_node_gbps");
    s.link.intra_bandwidth = intra > 0.0 ? intra * gbps : spec.intra_node_bandwidth;
  }
  if (config.get_double("sim.intra_node_gbps") < 0.0) {
    fail("sim.intra_node_gbps must be >= 0 (0 = the device's), found {}", config.get_double("sim.intra_node_gbps"));
  }
  s.link.inter_bandwidth = config.get_double("sim.inter_node_gbps") * gbps;
  s.link.odc_inter_efficiency = config.get_double("sim.odc_inter_node_efficiency");
  s.link.latency = config.get_double("sim.latency_us") * 1e-6;
  s.link.validate();
  const double param_bytes = config.get_double("sim.param_bytes");
  const double odc_param_bytes = config.get_double("sim.odc_param_bytes");
  if (odc_param_bytes < 0.0) fail("sim.odc_param_bytes must be >= 0 (0 = sim.param_bytes), found {}", odc_param_bytes);
  s.collective_bytes = unit_bytes(s.model, param_bytes, config.get_double("sim.grad_bytes"));
  s.odc_bytes = unit_bytes(s.model, odc_param_bytes > 0.0 ? odc_param_bytes : param_bytes,
                           config.get_double("sim.grad_bytes"));

  // Lengths.
  LengthSource source;
  source.path = config.get_string("data.lengths");
  source.format = config.get_string("data.format");
  source.vocab_size = s.model.vocab_size;
  source.mean_length = config.get_double("data.mean_length");
  source.sigma = config.get_double("data.sigma");
  source.min_length = config.get_int("data.min_length");
  source.max_length = config.get_int("data.max_length");
  const auto pool_size = config.get_int("data.num_sequences");
  if (pool_size < 0) fail("data.num_sequences must be >= 0, found {}", pool_size);
  const std::int64_t global = s.minibatch_size * s.devices;
  source.count = pool_size > 0 ? pool_size : (s.skip_minibatches + s.minibatches) * global;
  s.seed = static_cast<std::uint64_t>(config.get_int("data.seed"));
  source.seed = s.seed;
  s.shuffle = config.get_bool("data.shuffle");
  s.pool = load_lengths(source);
  if (static_cast<std::int64_t>(s.pool.lengths.size()) < global) {
    fail("data.minibatch_size {} x sim.devices {} = {} sequences per minibatch, but {} holds only {}",
         s.minibatch_size, s.devices, global, s.pool.description, s.pool.lengths.size());
  }

  // Planner inputs, as odc-train builds them.
  const std::int64_t longest = *std::max_element(s.pool.lengths.begin(), s.pool.lengths.end());
  s.token_cap = config.get_int("data.max_tokens_per_microbatch");
  if (s.token_cap < 0) fail("data.max_tokens_per_microbatch must be >= 0, found {}", s.token_cap);
  if (s.token_cap == 0) {
    const double ratio = config.get_double("data.packing_ratio");
    if (!(ratio > 0.0)) fail("data.packing_ratio must be positive, found {}", ratio);
    s.token_cap = static_cast<std::int64_t>(std::floor(static_cast<double>(longest) * ratio));
  }
  if (longest > s.token_cap) {
    fail("{}: a sequence of {} tokens exceeds the microbatch cap data.max_tokens_per_microbatch = {}",
         s.pool.description, longest, s.token_cap);
  }
  const std::string cost_kind = config.get_string("data.cost_model");
  if (cost_kind == "linear") {
    s.cost = data::CostModel::linear();
  } else if (cost_kind == "quadratic") {
    s.cost = data::CostModel::quadratic(config.get_double("data.cost_a"), config.get_double("data.cost_b"));
  } else {
    // Exactly odc-train's flops model (train/trainer.cpp), so plans match the trainer's.
    s.cost = data::CostModel::flops(s.model.linear_flops_per_token(), s.model.attention_flops_per_pair());
  }
  return s;
}

}  // namespace odc::sim

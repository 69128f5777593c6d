#include "odc/sim/sim_config.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "odc/core/device_specs.h"
#include "odc/core/error.h"
#include "odc/core/text.h"
#include "odc/data/context_groups.h"
#include "odc/data/data_config.h"
#include "odc/data/data_keys.h"
#include "odc/model/model_keys.h"
#include "odc/sim/calibration.h"
#include "odc/sim/cost_fit.h"

namespace odc::sim {

namespace {

constexpr const char* kAllMethods = "collective+local_sort,collective+lb_micro,odc+local_sort,odc+lb_micro,odc+lb_mini";
// Every schedule that can run (the default list leaves out the RL-only equal-count LB-Mini).
constexpr const char* kKnownMethods =
    "collective+local_sort,collective+lb_micro,odc+local_sort,odc+lb_micro,odc+lb_mini_equal,odc+lb_mini,"
    "collective+ref_lb_micro,odc+ref_lb_micro,odc+ref_lb_mini";

}  // namespace

std::vector<TunableSpec> sim_tunables() {
  using K = ValueKind;
  return {
      keys::model_config_sim.spec(),
      // data: the simulator's own keys (where lengths come from), then the ones odc-train shares
      // (data_keys.h; odc-sim's own defaults of a key both read are the *_sim variants there), in this order
      tunable("data.lengths", K::string, "\"\"",
              "sequence lengths to simulate: a text file with one length per line ('#' comments), or a dataset "
              "(see data.format); empty = the synthetic distribution below"),
      keys::data_format_sim.spec(),
      tunable("data.distribution", K::string, "lognormal", "synthetic length distribution (when data.lengths is empty)",
              {"lognormal"}),
      tunable("data.mean_length", K::number, "9000",
              "synthetic: mean of the untruncated log-normal (the simulated pool's statistics are reported); the "
              "default with sigma 0.9 truncated to [8192, 65536] is a LongAlign-like stand-in with a mean of about "
              "16.5K",
              Range::at_least(1)),
      tunable("data.sigma", K::number, "0.9", "synthetic: log-space standard deviation (larger = longer tail)",
              Range::at_least(0)),
      tunable("data.min_length", K::integer, "8192", "synthetic: shortest sequence", Range::at_least(1)),
      keys::data_max_length_sim.spec(),
      keys::data_over_length_sim.spec(),
      tunable("data.published_lengths", K::string, "\"\"",
              "the published statistics of the dataset the lengths stand in for, printed next to the simulated "
              "pool's"),
      tunable("data.num_sequences", K::integer, "0",
              "size of the synthetic pool the sampler draws from; 0 = exactly the sequences of the simulated "
              "minibatches (sim.minibatches x minibatch_size x sim.devices)",
              Range::at_least(0)),
      keys::data_extra_fields.spec(),
      keys::data_shuffle.spec(),
      keys::data_seed.spec(),
      keys::data_minibatch_size_sim.spec(),
      keys::data_max_tokens_per_microbatch.spec(),
      keys::data_packing_ratio.spec(),
      keys::data_cost_model_sim.spec(),
      keys::data_cost_a.spec(),
      keys::data_cost_b.spec(),
      keys::data_cost_c.spec(),
      keys::data_cost_points.spec(),
      // sim
      tunable("sim.label", K::string, "\"\"", "name of this setting in the output (empty = the config file's name)"),
      tunable("sim.devices", K::integer, "8", "simulated devices (data-parallel ranks)",
              Range::at_least(1).and_at_most(65536)),
      tunable("sim.devices_per_node", K::integer, "0",
              "devices per node; 0 = the device's (8 for GPUs; all devices when calibrated)", Range::at_least(0)),
      tunable("sim.sharding", K::string, "full",
              "parameter layout (train.sharding): full (shards over all devices: world-wide gathers and gradient "
              "hand-offs), hybrid (shards within a node, replicated across nodes: in-node gathers and hand-offs, "
              "one cross-node gradient all-reduce per minibatch; the optimizer steps a node's share), hpz (shards "
              "over all devices plus a secondary in-node copy refreshed world-wide at each minibatch start, which "
              "serves every gather; gradients to the world-wide owners); on one node every layout is full",
              {"full", "hybrid", "hpz"}),
      tunable("sim.device", K::string, "a100-80gb",
              "accelerator whose datasheet numbers drive compute (a100-80gb, h100-sxm, h200), or calibrated "
              "(per-unit times fitted from sim.calibration)"),
      tunable("sim.compute_model", K::string, "flops",
              "named devices: flops (FLOPs over peak x efficiency, no fixed costs) or fit (the reference "
              "implementation's per-microbatch fit a*u^2 + b*u per sequence + c per microbatch, see sim.fit)",
              {"flops", "fit"}),
      tunable("sim.fit", K::string, "\"\"",
              "sim.compute_model / data.cost_model fit: A,B,C in seconds (u = s/32000); empty = the published fit of "
              "the model's shape (DeepSeek-R1-Distill-Qwen 1.5B or 7B, A100), other shapes scaled by FLOPs"),
      tunable("sim.calibration", K::string, "\"\"",
              "Chrome trace written by odc-train (train.trace_file); required when sim.device = calibrated"),
      tunable("sim.minibatches", K::integer, "50", "global minibatches (optimizer steps) to simulate per method",
              Range::at_least(1)),
      tunable("sim.skip_minibatches", K::integer, "0",
              "minibatches drawn and discarded first (to match a measured run that excludes warm-up steps)",
              Range::at_least(0)),
      tunable("sim.methods", K::string, kAllMethods,
              "comma-separated COMM+BALANCE schedules to simulate (comm: collective, odc; balance: local_sort, "
              "lb_micro, lb_mini, lb_mini_equal — the last two with odc only; lb_mini_equal keeps equal sequence "
              "counts per device, as verl requires in RL; ref_lb_micro, ref_lb_mini: the reference "
              "implementation's own DynamicSameMicro and DynamicDiffMicro packing, the paper's baselines, "
              "ref_lb_mini with odc only)"),
      tunable("sim.baseline", K::string, "collective+lb_micro",
              "the schedule speedups are measured against (collective+ref_lb_micro: the paper's own baseline)"),
      tunable("sim.reference_cost", K::string, "fit_7b",
              "per-sequence cost the reference's planners (ref_lb_micro, ref_lb_mini) balance: fit_7b = its "
              "get_seq_costs_fit, which holds the 7B coefficients (a = 4.348357, b = 8.768377, u = s/32000) "
              "whatever the model; data = data.cost_model, as ours",
              {"fit_7b", "data"}),
      tunable("sim.reference_split", K::string, "spread",
              "how ref_lb_mini chooses between its free-count and equal-count device splits: spread = the "
              "smaller max - min device cost, as the reference does; makespan = the lower ODC makespan once "
              "packed, the per-microbatch cost included",
              {"spread", "makespan"}),
      tunable("sim.param_bytes", K::number, "2",
              "bytes per gathered parameter element (2 = bf16 on GPUs, 4 on the CPU)", Range::above(0)),
      tunable("sim.odc_param_bytes", K::number, "0",
              "bytes per element ODC gathers; 0 = sim.param_bytes (4 models the paper's reference code, which "
              "gathers the fp32 master shards)",
              Range::at_least(0)),
      tunable("sim.grad_bytes", K::number, "4", "bytes per gradient element reduced or pushed (fp32)",
              Range::above(0)),
      tunable("sim.gradient_checkpointing", K::boolean, "true",
              "named devices: backward recomputes each layer's forward (3x forward instead of 2x)"),
      tunable("sim.matmul_efficiency", K::number, "0.6",
              "named devices: fraction of peak bf16 FLOP/s of the linear layers", Range::above(0).and_at_most(1)),
      tunable("sim.attention_efficiency", K::number, "0.45", "named devices: fraction of peak bf16 FLOP/s of attention",
              Range::above(0).and_at_most(1)),
      tunable("sim.optimizer_bytes_per_element", K::number, "32",
              "named devices: memory traffic of the AdamW step per owned element", Range::at_least(0)),
      tunable("sim.intra_node_gbps", K::number, "0",
              "per-device bandwidth to the node's switch, Gb/s per direction; 0 = the device's NVLink (2400 on "
              "A100), or 80 when calibrated (shared-memory copies on a CPU host)",
              Range::at_least(0)),
      tunable("sim.inter_node_gbps", K::number, "800",
              "per-node network bandwidth, Gb/s per direction (paper: 800 RoCE)", Range::at_least(0)),
      tunable("sim.odc_inter_node_efficiency", K::number, "1.0",
              "per-byte efficiency of ODC's point-to-point traffic on the node's network link relative to a ring "
              "collective (assumption; 1 = as efficient: the flat pattern alone already moves devices_per_node x "
              "more bytes across nodes, 4.3x a ring's time at 16 devices)",
              Range::above(0).and_at_most(1)),
      tunable("sim.link_contention", K::boolean, "true",
              "a device's gathers and gradient pushes share its links (each direction carries its own pulls or the "
              "shards it serves plus pushes), as do the collective's all-gathers and reduce-scatters; false = "
              "independent channels"),
      tunable("sim.accumulate_bytes_per_element", K::number, "12",
              "named devices, ODC: memory traffic of an owner adding one pushed gradient element into its "
              "accumulator (fp32: read both, write one), at the device's memory bandwidth; 0 = free. Calibrated "
              "runs leave it out (the trace's compute already ran next to the accumulation)",
              Range::at_least(0)),
      tunable("sim.latency_us", K::number, "20", "fixed cost of every gather, reduction and barrier, microseconds",
              Range::at_least(0)),
      tunable("sim.prefetch_depth", K::integer, "1",
              "gathers are issued this many steps (units) ahead of their use; 0 = no overlap of gathers with compute. "
              "1 is FSDP's: FSDP2 prefetches one all-gather ahead in forward and backward (FSDP1: backward_prefetch "
              "BACKWARD_PRE, limit_all_gathers), which the reference's ODC keeps",
              Range::at_least(0).and_at_most(64)),
      tunable("sim.collective_model", K::string, "bandwidth",
              "how a collective's time is modeled: bandwidth = sim.latency_us + the ring's bytes over its slowest "
              "link; nccl = NCCL's own tuning model of a ring all-gather / reduce-scatter (src/graph/tuning.cc): "
              "latency per hop (NVLink, network), its protocols' bandwidths by message size, the bus bandwidth "
              "capped (sim.nccl_max_bus_gbps); named devices only",
              {"bandwidth", "nccl"}),
      tunable("sim.nccl_max_bus_gbps", K::number, "0",
              "collective_model nccl: cap on the ring's bus bandwidth, Gb/s; 0 = the device's as NCCL's tuning caps "
              "it (A100, compute capability 8.0: 235 GB/s = 1880 Gb/s; others: uncapped, the link's)",
              Range::at_least(0)),
      tunable("sim.nccl_protocols", K::string, "ll,ll128,simple",
              "collective_model nccl: the protocols NCCL's tuner may choose from, as NCCL_PROTO (LL128 is on by "
              "default on NVLink with compute capability 7.0 and 8.0)"),
      tunable("sim.fsdp_root_unit", K::boolean, "false",
              "FSDP's wrapping (per decoder layer, the rest in the root): the embedding and the head (final norm, "
              "LM head) are one unit, gathered at the embedding's forward and kept until the embedding's backward, "
              "its gradient handed off once then; false = each its own unit, as the trainer shards them. For both "
              "comms (the reference's ODC runs inside the same wrapping)"),
      tunable("sim.collective_padding", K::string, "empty",
              "collective: what a device runs for a microbatch step it has no microbatch for (it still joins the "
              "step's collectives): empty = nothing (the trainer's collective comm); dummy = a one-token microbatch, "
              "as FSDP must run (its collectives are issued by the module's forward and backward hooks), costing the "
              "per-step fixed costs (the fit's c)",
              {"empty", "dummy"}),
      tunable("sim.max_outstanding_reductions", K::integer, "3",
              "gradient reductions/pushes in flight per device before backward waits",
              Range::at_least(1).and_at_most(std::numeric_limits<int>::max())),
      tunable("sim.context_parallel", K::boolean, "false",
              "split sequences longer than the microbatch token cap (data.max_tokens_per_microbatch) over several "
              "devices: odc methods by groups the planner chooses per minibatch (dynamic; balances lb_mini, "
              "local_sort, round_robin), collective methods by one static degree for the run (sim.context_degree); "
              "every decoder layer exchanges the split sequences' keys and values between the group's members"),
      tunable("sim.context_degree", K::integer, "0",
              "context parallelism, collective methods: devices per static group (consecutive, dividing "
              "sim.devices); 0 = the smallest whose share of the pool's longest sequence fits the token cap",
              Range::at_least(0)),
      tunable("sim.max_context_degree", K::integer, "0",
              "context parallelism, odc methods: the most devices one dynamic group may span; 0 = all",
              Range::at_least(0)),
      tunable("sim.activation_bytes", K::number, "2",
              "context parallelism: bytes per key/value element exchanged between a group's members (bf16)",
              Range::above(0)),
      tunable("sim.collective_compute_factor", K::number, "1.0",
              "Collective's compute steps take this x their modeled time (CPU trainer: ranks busy-polling inside MPI "
              "collectives slow the computing ones; bench/e2e.py measures it from two traces of the same microbatches)",
              Range::above(0).and_at_most(10)),
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
    fail("{}: '{}' is not a schedule; expected COMM+BALANCE, one of {}", key, text, kKnownMethods);
  };
  if (plus == std::string::npos) bad();
  const std::string comm = text.substr(0, plus);
  const std::string balance = text.substr(plus + 1);
  if (comm != "odc" && comm != "collective") bad();
  Method method{parse_comm(comm), data::Balance::lb_mini};
  try {
    method.balance = data::parse_balance(balance);  // the planner's names, whatever it adds
  } catch (const Error&) {
    bad();
  }
  if (method.comm == CommKind::collective && method.balance == data::Balance::lb_mini) {
    fail("{}: collective+lb_mini cannot run: LB-Mini gives devices different numbers of microbatches, which "
         "collectives cannot (use odc+lb_mini, or collective+lb_micro)", key);
  }
  if (method.comm == CommKind::collective && method.balance == data::Balance::ref_lb_mini) {
    fail("{}: collective+ref_lb_mini cannot run: the reference's LB-Mini gives devices different numbers of "
         "microbatches, which collectives cannot (use odc+ref_lb_mini, or collective+ref_lb_micro)", key);
  }
  if (method.comm == CommKind::collective && method.balance == data::Balance::lb_mini_equal) {
    fail("{}: collective+lb_mini_equal cannot run: it gives devices different numbers of microbatches, which "
         "collectives cannot (use odc+lb_mini_equal, or collective+lb_micro)", key);
  }
  return method;
}

std::vector<Method> parse_methods(const std::string& list, const std::string& key) {
  std::vector<Method> out;
  for (const auto& item : split_trimmed(list)) {
    if (item.empty()) continue;
    const Method method = parse_method(item, key);
    if (std::find(out.begin(), out.end(), method) != out.end()) fail("{}: '{}' is listed twice", key, item);
    out.push_back(method);
  }
  if (out.empty()) fail("{}: no schedules listed (e.g. {})", key, kAllMethods);
  return out;
}

std::vector<Method> all_methods() { return parse_methods(kAllMethods, "all methods"); }

namespace {

// sim.context_parallel: the methods it can run, the static degree, the exchange and its price in
// the planner's cost units.
void set_context_parallel(const Config& config, SimSetup& s, std::int64_t longest) {
  std::vector<Method> checked = s.methods;
  checked.push_back(s.baseline);
  for (const Method& m : checked) {
    const bool dynamic_ok = m.balance == data::Balance::lb_mini || m.balance == data::Balance::local_sort ||
                            m.balance == data::Balance::round_robin;
    if (m.comm == CommKind::odc && !dynamic_ok) {
      fail("sim.context_parallel: {} cannot plan dynamic context groups; with odc use lb_mini, local_sort or "
           "round_robin (collective methods split by the static degree)",
           m.name());
    }
  }
  s.max_context_degree = static_cast<int>(config.get_int("sim.max_context_degree"));
  const auto asked = static_cast<int>(config.get_int("sim.context_degree"));
  auto fits = [&](int d) { return s.devices % d == 0 && data::context_max_rows(longest, d) <= s.token_cap; };
  if (asked > 0) {
    if (!fits(asked)) {
      fail("sim.context_degree = {}: it must divide sim.devices = {} and split the longest sequence ({} tokens) into "
           "shares within data.max_tokens_per_microbatch = {} (share: {} tokens)",
           asked, s.devices, longest, s.token_cap, data::context_max_rows(longest, asked));
    }
    s.context_degree = asked;
  } else {
    s.context_degree = 0;
    for (int d = 1; d <= s.devices && s.context_degree == 0; ++d) {
      if (fits(d)) s.context_degree = d;
    }
    if (s.context_degree == 0) {
      fail("sim.context_parallel: no static degree dividing sim.devices = {} splits the longest sequence ({} tokens) "
           "within data.max_tokens_per_microbatch = {}",
           s.devices, longest, s.token_cap);
    }
  }
  s.exchange.kv_bytes_per_token =
      2.0 * static_cast<double>(s.model.kv_dim()) * config.get_double("sim.activation_bytes");
  s.exchange.recompute = config.get_bool("sim.gradient_checkpointing");
  s.exchange.link = s.link;
  // The planner's price of the exchange (CostModel::exchange_per_token): seconds per token of the
  // whole sequence at the intra-node bandwidth (every layer, every pass), over the seconds of one
  // cost unit, read off the compute model between two lengths (fixed costs cancel).
  const double passes = s.exchange.recompute ? 3.0 : 2.0;
  const double seconds_per_token = s.link.intra_bandwidth > 0.0 ? static_cast<double>(s.model.num_hidden_layers) *
                                                                      passes * s.exchange.kv_bytes_per_token /
                                                                      s.link.intra_bandwidth
                                                                : 0.0;
  const std::int64_t l0 = 4096;
  const double dt = s.compute.microbatch_time(2 * l0, causal_pairs(2 * l0)) - s.compute.microbatch_time(l0, causal_pairs(l0));
  const double dc = s.cost.cost(2 * l0) - s.cost.cost(l0);
  const double seconds_per_unit = dc > 0.0 && dt > 0.0 ? dt / dc : 1.0;
  s.cost.exchange_per_token = seconds_per_token / seconds_per_unit;
  s.reference_cost.exchange_per_token = s.cost.exchange_per_token;
  s.notes.push_back(fmt::format(
      "context parallelism: odc methods dynamic groups (at most {} devices), collective methods static degree {}; "
      "exchange {:.0f} B per token and layer, planner price {:.4g} cost units per token",
      s.max_context_degree == 0 ? s.devices : s.max_context_degree, s.context_degree, s.exchange.kv_bytes_per_token,
      s.cost.exchange_per_token));
}

}  // namespace

SimSetup build_setup(const Config& config, const std::string& default_label) {
  SimSetup s;
  s.label = config.get_string("sim.label");
  if (s.label.empty()) s.label = default_label.empty() ? "default" : default_label;
  s.methods = parse_methods(config.get_string("sim.methods"), "sim.methods");
  s.baseline = parse_method(config.get_string("sim.baseline"), "sim.baseline");

  // Ranges are the schema's (sim_tunables), checked when the values were set.
  s.devices = static_cast<int>(config.get_int("sim.devices"));
  s.minibatch_size = keys::data_minibatch_size_sim.read(config);
  s.minibatches = config.get_int("sim.minibatches");
  s.skip_minibatches = config.get_int("sim.skip_minibatches");
  s.prefetch_depth = static_cast<int>(config.get_int("sim.prefetch_depth"));
  s.max_outstanding_reductions = static_cast<int>(config.get_int("sim.max_outstanding_reductions"));
  s.collective_compute_factor = config.get_double("sim.collective_compute_factor");
  s.shared_link = config.get_bool("sim.link_contention");

  // The model: the calibration trace's, unless the user gave one (then they must agree).
  const std::string device = config.get_string("sim.device");
  const std::string calibration_path = config.get_string("sim.calibration");
  const bool calibrated = device == "calibrated";
  const std::string compute_model = config.get_string("sim.compute_model");
  s.model = model::model_config_from(config);
  if (calibrated && compute_model == "fit") {
    fail("sim.compute_model = fit models a named device (sim.device, e.g. a100-80gb); sim.device = calibrated fits "
         "its own per-unit times from sim.calibration");
  }
  if (calibrated && config.get_string("sim.collective_model") == "nccl") {
    fail("sim.collective_model = nccl models NCCL's collectives on GPUs; sim.device = calibrated replays a traced "
         "trainer (use sim.collective_model = bandwidth with its sim.intra_node_gbps)");
  }
  // The fit of the simulated model, derived on first use (a calibrated model may be any shape).
  std::optional<CostFit> fit_cache;
  auto fit = [&config, &s, &fit_cache]() -> const CostFit& {
    if (!fit_cache) {
      const std::string text = config.get_string("sim.fit");
      fit_cache = text.empty() ? fit_for_model(s.model) : parse_fit(text, "sim.fit");
    }
    return *fit_cache;
  };
  if (calibrated) {
    if (calibration_path.empty()) {
      fail("sim.device = calibrated needs sim.calibration = PATH of a trace written by odc-train (train.trace_file)");
    }
    const Calibration calibration = calibrate_from_trace_file(calibration_path);
    if (keys::model_config_sim.source(config) == "default") {
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
    if (compute_model == "fit") s.compute = compute_model_from_fit(fit(), s.compute);
    // Owner-side accumulation: bytes of memory traffic per pushed element, at the device's bandwidth,
    // per byte of pushed gradient.
    s.accumulate_seconds_per_byte =
        config.get_double("sim.accumulate_bytes_per_element") / spec.memory_bandwidth / config.get_double("sim.grad_bytes");
  }

  // Links.
  s.link.devices = s.devices;
  const auto per_node = config.get_int("sim.devices_per_node");
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
  s.link.inter_bandwidth = config.get_double("sim.inter_node_gbps") * gbps;
  s.link.odc_inter_efficiency = config.get_double("sim.odc_inter_node_efficiency");
  s.link.latency = config.get_double("sim.latency_us") * 1e-6;
  s.link.collective = parse_collective_model(config.get_string("sim.collective_model"), "sim.collective_model");
  if (s.link.collective == CollectiveModel::nccl) {
    s.link.nccl = NcclRing::with_protocols(config.get_string("sim.nccl_protocols"), "sim.nccl_protocols");
    const double cap = config.get_double("sim.nccl_max_bus_gbps");
    s.link.nccl.max_bus_bandwidth = cap > 0.0 ? cap * gbps : nccl_bus_cap(device_spec(device));
  }
  s.dummy_padding = config.get_string("sim.collective_padding") == "dummy";
  s.fsdp_root_unit = config.get_bool("sim.fsdp_root_unit");
  s.sharding = distributed::parse_sharding(config.get_string("sim.sharding"));
  if (s.sharding != Sharding::full && s.link.spans_nodes() && s.devices % s.link.devices_per_node != 0) {
    fail("sim.sharding = {} needs whole nodes (every node holds a whole {}): sim.devices = {} is not a multiple of "
         "sim.devices_per_node = {}",
         distributed::sharding_name(s.sharding),
         s.sharding == Sharding::hybrid ? "copy of the shards" : "secondary copy of the weights", s.devices,
         s.link.devices_per_node);
  }
  s.link.validate();
  if (s.sharding == Sharding::hybrid && s.link.spans_nodes()) {
    // Each device owns (and steps) 1/devices_per_node of the model instead of 1/devices.
    s.compute.optimizer_s *= static_cast<double>(s.devices) / static_cast<double>(s.link.devices_per_node);
  }
  const double param_bytes = config.get_double("sim.param_bytes");
  const double odc_param_bytes = config.get_double("sim.odc_param_bytes");
  s.collective_bytes = unit_bytes(s.model, param_bytes, config.get_double("sim.grad_bytes"));
  s.odc_bytes = unit_bytes(s.model, odc_param_bytes > 0.0 ? odc_param_bytes : param_bytes,
                           config.get_double("sim.grad_bytes"));

  // Lengths.
  LengthSource source;
  source.path = config.get_string("data.lengths");
  source.format = keys::data_format_sim.read(config);
  source.ignore_extra_fields = keys::data_extra_fields.read(config) == "ignore";
  source.vocab_size = s.model.vocab_size;
  source.mean_length = config.get_double("data.mean_length");
  source.sigma = config.get_double("data.sigma");
  source.min_length = config.get_int("data.min_length");
  source.max_length = keys::data_max_length_sim.read(config);
  source.over_limit = parse_over_limit(keys::data_over_length_sim.read(config));
  const auto pool_size = config.get_int("data.num_sequences");
  const std::int64_t global = s.minibatch_size * s.devices;
  source.count = pool_size > 0 ? pool_size : (s.skip_minibatches + s.minibatches) * global;
  s.seed = static_cast<std::uint64_t>(keys::data_seed.read(config));
  source.seed = s.seed;
  s.shuffle = keys::data_shuffle.read(config);
  s.pool = load_lengths(source);
  s.pool_stats = length_stats(s.pool.lengths);
  s.published_lengths = config.get_string("data.published_lengths");
  if (static_cast<std::int64_t>(s.pool.lengths.size()) < global) {
    fail("data.minibatch_size {} x sim.devices {} = {} sequences per minibatch, but {} holds only {}",
         s.minibatch_size, s.devices, global, s.pool.description, s.pool.lengths.size());
  }

  // Planner inputs, as odc-train builds them.
  const std::int64_t longest = *std::max_element(s.pool.lengths.begin(), s.pool.lengths.end());
  s.token_cap = data::token_cap(config, longest);
  s.context_parallel = config.get_bool("sim.context_parallel");
  if (longest > s.token_cap && !s.context_parallel) {
    fail("{}: a sequence of {} tokens exceeds the microbatch cap data.max_tokens_per_microbatch = {} (split such "
         "sequences over several devices: sim.context_parallel = true)",
         s.pool.description, longest, s.token_cap);
  }
  s.cost = keys::data_cost_model_sim.read(config) == "fit"
               ? planner_cost_from_fit(fit())
               : data::cost_model(config, s.model.linear_flops_per_token(), s.model.attention_flops_per_pair());
  s.reference_cost = config.get_string("sim.reference_cost") == "fit_7b" ? planner_cost_from_fit(reference_packing_fit())
                                                                         : s.cost;
  // The reference balances its own cost but never sees c; its plans' makespans and planned bubbles
  // (and the makespan split choice) count the simulated model's c, as ours do.
  s.reference_cost.per_microbatch = s.cost.per_microbatch;
  s.reference_split = config.get_string("sim.reference_split") == "spread" ? data::ReferenceSplit::spread
                                                                           : data::ReferenceSplit::makespan;
  if (s.context_parallel) set_context_parallel(config, s, longest);
  return s;
}

}  // namespace odc::sim

// Simulator inputs and the end-to-end run: config schema and errors, methods, length sources,
// the named-device compute model's formulas, link costs, and a small full simulation.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "odc/core/device_specs.h"
#include "odc/core/error.h"
#include "odc/model/units.h"
#include "odc/sim/runner.h"
#include "unit/sim/sim_links.h"

using namespace odc::sim;
using Catch::Matchers::Contains;

namespace {

std::filesystem::path temp_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

// A small 2-layer model with a vocabulary of 1000 and 4 attention heads.
odc::model::LlamaConfig two_layer_config(std::int64_t hidden, std::int64_t intermediate, std::int64_t kv_heads) {
  odc::model::LlamaConfig config;
  config.vocab_size = 1000;
  config.hidden_size = hidden;
  config.intermediate_size = intermediate;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = kv_heads;
  return config;
}

}  // namespace

TEST_CASE("methods parse and reject what cannot run", "[sim]") {
  CHECK(all_methods().size() == 5);
  CHECK(parse_method("odc+lb_mini", "k").name() == "odc+lb_mini");
  CHECK(parse_methods(" odc+lb_mini , collective+local_sort", "k").size() == 2);
  CHECK_THROWS_WITH(parse_method("collective+lb_mini", "sim.methods"),
                    Contains("sim.methods") && Contains("collective+lb_mini"));
  CHECK(parse_method("odc+lb_mini_equal", "k").name() == "odc+lb_mini_equal");
  CHECK_THROWS_WITH(parse_method("collective+lb_mini_equal", "sim.methods"),
                    Contains("sim.methods: collective+lb_mini_equal cannot run"));
  CHECK(parse_method("collective+ref_lb_micro", "k").name() == "collective+ref_lb_micro");
  CHECK(parse_method("odc+ref_lb_mini", "k").name() == "odc+ref_lb_mini");
  CHECK_THROWS_WITH(parse_method("collective+ref_lb_mini", "sim.methods"),
                    Contains("sim.methods: collective+ref_lb_mini cannot run"));
  CHECK_THROWS_WITH(parse_method("odc", "sim.baseline"), Contains("sim.baseline") && Contains("COMM+BALANCE"));
  CHECK_THROWS_WITH(parse_methods("odc+lb_mini,odc+lb_mini", "sim.methods"), Contains("twice"));
  CHECK_THROWS_AS(parse_methods(",", "sim.methods"), odc::Error);
}

TEST_CASE("length files: comments, blanks and file:line errors", "[sim]") {
  const auto good = temp_file("odc_sim_lengths_good.txt", "# lengths\n100\n\n  250  # a comment\n3000\n");
  CHECK(read_length_file(good.string()) == std::vector<std::int64_t>{100, 250, 3000});
  LengthSource source;
  source.path = good.string();
  source.max_length = 1000;
  source.over_limit = OverLimit::truncate;
  const auto pool = load_lengths(source);
  CHECK(pool.lengths == std::vector<std::int64_t>{100, 250, 1000});
  CHECK(pool.truncated == 1);
  source.over_limit = OverLimit::drop;  // the default: a dataset filter
  const auto filtered = load_lengths(source);
  CHECK(filtered.lengths == std::vector<std::int64_t>{100, 250});
  CHECK(filtered.dropped == 1);
  CHECK_THAT(filtered.description, Contains("1 longer than 1000 tokens dropped"));
  source.max_length = 50;
  CHECK_THROWS_WITH(load_lengths(source), Contains("every sequence is longer than data.max_length = 50"));
  const auto bad = temp_file("odc_sim_lengths_bad.txt", "100\n12x\n");
  CHECK_THROWS_WITH(read_length_file(bad.string()), Contains(bad.string() + ":2") && Contains("12x"));
  const auto negative = temp_file("odc_sim_lengths_negative.txt", "-5\n");
  CHECK_THROWS_WITH(read_length_file(negative.string()), Contains(":1"));
  const auto empty = temp_file("odc_sim_lengths_empty.txt", "# nothing\n");
  CHECK_THROWS_WITH(read_length_file(empty.string()), Contains("no sequence lengths"));
  CHECK_THROWS_WITH(read_length_file("/nonexistent/lengths.txt"), Contains("/nonexistent/lengths.txt"));
  for (const auto& p : {good, bad, negative, empty}) std::filesystem::remove(p);
}

TEST_CASE("synthetic lengths are deterministic, clipped and near the requested mean", "[sim]") {
  const auto a = lognormal_lengths(1000.0, 0.5, 100, 5000, 20000, 3);
  const auto b = lognormal_lengths(1000.0, 0.5, 100, 5000, 10, 3);
  CHECK(std::equal(b.begin(), b.end(), a.begin()));  // sequence i does not depend on the count
  double sum = 0.0;
  for (const auto length : a) {
    CHECK(length >= 100);
    CHECK(length <= 5000);
    sum += static_cast<double>(length);
  }
  CHECK(sum / static_cast<double>(a.size()) == Approx(1000.0).epsilon(0.03));
  CHECK_THROWS_WITH(lognormal_lengths(1000.0, 0.5, 100, 50, 10, 0), Contains("data.max_length"));
}

namespace {

double phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

TEST_CASE("dropping truncates the log-normal, truncating piles sequences up at the limits", "[sim]") {
  // Untruncated mean 9000, sigma 0.9, kept within [8192, 65536]: the truncated log-normal's mean is
  // exp(mu + s^2/2) * (Phi(b - s) - Phi(a - s)) / (Phi(b) - Phi(a)) with a, b the standardized log limits.
  const double sigma = 0.9;
  const double mu = std::log(9000.0) - 0.5 * sigma * sigma;
  const double a = (std::log(8192.0) - mu) / sigma;
  const double b = (std::log(65536.0) - mu) / sigma;
  const double expected_mean = 9000.0 * (phi(b - sigma) - phi(a - sigma)) / (phi(b) - phi(a));
  const auto dropped = lognormal_lengths(9000.0, sigma, 8192, 65536, 40000, 5, OverLimit::drop);
  const auto stats = length_stats(dropped);
  CHECK(stats.shortest >= 8192);
  CHECK(stats.longest <= 65536);
  // Standard error of the mean over 40000 draws is ~0.4% of it; 1.5% is beyond 3 of them.
  CHECK(stats.mean == Approx(expected_mean).epsilon(0.015));
  CHECK(stats.share_at_longest < 0.001);  // no spike at the cap
  // Clipping: the mass below 8192 lands exactly on it (Phi(a) of all draws, ~54% here).
  const auto clipped = lognormal_lengths(9000.0, sigma, 8192, 65536, 40000, 5, OverLimit::truncate);
  const auto at_floor = std::count(clipped.begin(), clipped.end(), 8192);
  CHECK(static_cast<double>(at_floor) / 40000.0 == Approx(phi(a)).margin(0.01));
  CHECK(length_stats(clipped).mean < stats.mean);
  // A max-length sweep moves every sequence monotonically (the same quantile under each limit), and
  // a 16K limit has no spike at 16K when dropping (clipping would put ~18% there).
  const auto short_limit = lognormal_lengths(9000.0, sigma, 8192, 16384, 40000, 5, OverLimit::drop);
  for (std::size_t i = 0; i < dropped.size(); ++i) REQUIRE(short_limit[i] <= dropped[i]);
  CHECK(length_stats(short_limit).share_at_longest < 0.001);
  const auto clipped_short = lognormal_lengths(9000.0, sigma, 8192, 16384, 40000, 5, OverLimit::truncate);
  CHECK(static_cast<double>(std::count(clipped_short.begin(), clipped_short.end(), 16384)) / 40000.0 ==
        Approx(1.0 - phi((std::log(16384.0) - mu) / sigma)).margin(0.01));
  CHECK_THROWS_WITH(lognormal_lengths(100.0, 0.1, 8192, 65536, 10, 0, OverLimit::drop), Contains("keeps almost none"));
  CHECK_THROWS_WITH(parse_over_limit("clip"), Contains("data.over_length"));
}

TEST_CASE("length statistics: mean, quantiles and the share at the maximum", "[sim]") {
  const auto stats = length_stats({10, 20, 30, 40, 40});
  CHECK(stats.count == 5);
  CHECK(stats.mean == Approx(28.0));
  CHECK(stats.median == Approx(30.0));
  CHECK(stats.p95 == Approx(40.0));
  CHECK(stats.longest == 40);
  CHECK(stats.share_at_longest == Approx(0.4));
  CHECK_THAT(stats.text(), Contains("40.0% at max") && Contains("5 sequences"));
}

TEST_CASE("named-device compute follows the FLOP formulas", "[sim]") {
  auto config = two_layer_config(256, 512, 2);
  config.head_dim = 64;
  const auto& device = odc::device_spec("a100-80gb");
  DeviceComputeOptions options;
  options.gradient_checkpointing = false;
  const auto model = compute_model_for_device(config, device, options);
  REQUIRE(model.forward.size() == 3);
  const double matmul_params = 2.0 * 256 * 256 + 2.0 * 256 * 128 + 3.0 * 256 * 512;
  const double tokens = 1e6;  // large enough to be compute bound
  const double pairs = 5e9;
  const double expected = 2.0 * matmul_params * tokens / (device.peak_bf16_flops * 0.6) +
                          4.0 * 256 * pairs / (device.peak_bf16_flops * 0.45);
  CHECK(model.time({1, Phase::forward}, 1000000, pairs) == Approx(expected));
  CHECK(model.time({1, Phase::backward}, 1000000, pairs) == Approx(2.0 * expected));
  options.gradient_checkpointing = true;
  CHECK(compute_model_for_device(config, device, options).time({1, Phase::backward}, 1000000, pairs) ==
        Approx(3.0 * expected));
  // A tiny microbatch is bound by reading the layer's weights.
  const auto layer_numel = static_cast<double>(odc::model::build_unit_layouts(config)[1].numel);
  CHECK(model.time({1, Phase::forward}, 1, 1.0) == Approx(layer_numel * 2.0 / device.memory_bandwidth));
  CHECK(model.time({1, Phase::forward}, 0, 0.0) == 0.0);
  CHECK(model.head.c1 == Approx(3.0 * 2.0 * 1000 * 256 / (device.peak_bf16_flops * 0.6)));
  CHECK(model.steps().size() == 7);
  options.matmul_efficiency = 1.5;
  CHECK_THROWS_WITH(compute_model_for_device(config, device, options), Contains("sim.matmul_efficiency"));
}

TEST_CASE("links: ring and point-to-point agree within a node, ODC is slower across nodes", "[sim]") {
  LinkModel link = test::a100_nodes(8);
  const double bytes = 1e9;
  CHECK(link.transfer_time(CommKind::collective, bytes) == Approx(bytes * 7 / 8 / 300e9));
  CHECK(link.transfer_time(CommKind::odc, bytes) == Approx(link.transfer_time(CommKind::collective, bytes)));
  link.devices = 16;
  const double ring = link.transfer_time(CommKind::collective, bytes);
  const double p2p = link.transfer_time(CommKind::odc, bytes);
  CHECK(ring == Approx(bytes * 15 / 16 / 100e9));
  CHECK(p2p == Approx(bytes / 16 * 8 / (100e9 / 8)));  // 8 remote shards over 1/8 of the link
  CHECK(p2p / ring > 4.0);
  link.devices = 12;
  CHECK_THROWS_WITH(link.validate(), Contains("sim.devices_per_node"));
  CHECK(LinkModel::free(4).transfer_time(CommKind::odc, bytes) == 0.0);
}

TEST_CASE("config errors name the key", "[sim]") {
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"sim.device=tpu-v9"}), ""), Contains("tpu-v9") && Contains("a100-80gb"));
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"sim.device=calibrated"}), ""), Contains("sim.calibration"));
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"sim.device=calibrated", "sim.calibration=/nonexistent/t.json"}), ""),
                    Contains("/nonexistent/t.json"));
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"data.lengths=/nonexistent/l.txt"}), ""), Contains("/nonexistent/l.txt"));
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"sim.devices=0"}), ""), Contains("sim.devices"));
  CHECK_THROWS_WITH(build_setup(load_sim_config("", {"data.max_tokens_per_microbatch=1000"}), ""),
                    Contains("data.max_tokens_per_microbatch"));
  CHECK_THROWS_AS(load_sim_config("", {"sim.no_such_key=1"}), odc::Error);
}

TEST_CASE("a small end-to-end simulation", "[sim]") {
  const auto lengths = temp_file("odc_sim_run_lengths.txt", [] {
    std::string text;
    for (int i = 0; i < 64; ++i) text += std::to_string(200 + (i * 7919) % 8000) + "\n";
    return text;
  }());
  const auto config = load_sim_config("", {"data.lengths=" + lengths.string(), "sim.devices=4", "sim.minibatches=4",
                                           "data.minibatch_size=4", "model.config.num_hidden_layers=4"});
  const auto setup = build_setup(config, "unit");
  CHECK(setup.label == "unit");
  CHECK(setup.token_cap == 8119);  // the longest length (packing ratio 1)
  const auto results = run_simulation(setup);
  REQUIRE(results.methods.size() == 5);
  for (const auto& r : results.methods) {
    CHECK(r.minibatch_time_s > 0.0);
    CHECK(r.bubble_simulated >= 0.0);
    CHECK(r.bubble_simulated < 1.0);
    CHECK(r.samples_per_s_per_device == Approx(4.0 / r.minibatch_time_s));
    CHECK(!r.first.devices.empty());
    const auto line = method_json(results, r);
    CHECK(line["method"] == r.method.name());
    CHECK(line.contains("zero_overhead_bound"));
  }
  const auto& baseline = results.methods[1];
  REQUIRE(baseline.method.name() == "collective+lb_micro");
  CHECK(baseline.speedup == Approx(1.0));
  CHECK(baseline.zero_overhead_bound == Approx(1.0));
  // ODC with LB-Mini balances whole minibatches: never more idle than the collective baseline.
  CHECK(results.methods[4].bubble_simulated <= baseline.bubble_simulated + 1e-9);
  CHECK_THAT(markdown_table(results), Contains("odc+lb_mini") && Contains("(baseline)"));
  CHECK(timelines_json(results)["methods"].size() == 5);
  std::filesystem::remove(lengths);
}

TEST_CASE("the reference's own bubble estimate: its 7B fit without c, of every method's plans", "[sim]") {
  // With the planner's cost the reference's (7B fit) and no per-microbatch c, the estimate is the
  // planned bubble itself; with c it differs (the planned bubble counts c, the reference never sees it).
  const std::vector<std::string> common = {"sim.compute_model=fit", "data.cost_model=fit", "sim.minibatches=6",
                                           "sim.methods=collective+lb_micro,collective+ref_lb_micro,odc+ref_lb_mini"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return run_simulation(build_setup(load_sim_config("", extra), "unit"));
  };
  const auto no_c = with({"sim.fit=4.348357,8.768377,0"});
  for (const auto& r : no_c.methods) {
    CHECK(r.bubble_reference_estimate == Approx(r.bubble_planned).margin(1e-12));
    CHECK(method_json(no_c, r)["bubble_reference_estimate"].is_number());
  }
  const auto with_c = with({"sim.fit=4.348357,8.768377,0.951"});
  for (const auto& r : with_c.methods) {
    CHECK(r.bubble_reference_estimate > 0.0);
    CHECK(r.bubble_reference_estimate != Approx(r.bubble_planned).margin(1e-6));
  }
  // Planned bubbles are in the simulated model's cost for the reference's plans too: at one sequence
  // per device both collectives plan one microbatch each, and their planned bubbles agree though the
  // reference balanced the 7B fit and the model is 1.5B's.
  const auto one = run_simulation(build_setup(
      load_sim_config("", {"sim.compute_model=fit", "data.cost_model=fit", "sim.minibatches=4", "data.minibatch_size=1",
                           "sim.methods=collective+lb_micro,collective+ref_lb_micro"}),
      "unit"));
  CHECK(one.methods[0].bubble_planned == Approx(one.methods[1].bubble_planned).margin(1e-12));
  CHECK(one.methods[0].bubble_reference_estimate == Approx(one.methods[1].bubble_reference_estimate).margin(1e-12));
  CHECK(one.methods[0].bubble_reference_estimate != Approx(one.methods[0].bubble_planned).margin(1e-6));
  // Context-parallel plans have no reference counterpart: null.
  const auto split = run_simulation(build_setup(
      load_sim_config("", {"sim.context_parallel=true", "data.max_tokens_per_microbatch=32768", "sim.minibatches=2",
                           "sim.methods=odc+lb_mini"}),
      "unit"));
  CHECK(split.methods[0].bubble_reference_estimate < 0.0);
  CHECK(method_json(split, split.methods[0])["bubble_reference_estimate"].is_null());
}

TEST_CASE("the root unit's bytes hold the embedding and the head's own parameters once", "[sim]") {
  auto config = two_layer_config(64, 128, 4);
  config.tie_word_embeddings = false;
  const auto untied = unit_bytes(config, 2.0, 4.0);
  CHECK(untied.root_gather == Approx(untied.gather.front() + untied.gather.back()));
  CHECK(untied.root_reduce == Approx(untied.reduce.front() + untied.reduce.back()));
  config.tie_word_embeddings = true;
  const auto tied = unit_bytes(config, 2.0, 4.0);
  // Tied: the head gathers the embedding itself as a unit; the root holds it once (embedding + norm).
  CHECK(tied.gather.back() == Approx(tied.gather.front() + 64 * 2.0));
  CHECK(tied.root_gather == Approx(tied.gather.back()));
  CHECK(tied.root_reduce == Approx(tied.reduce.back()));
}

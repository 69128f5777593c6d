// Trainer: the minibatch objective does not depend on how a minibatch is cut into microbatches,
// and the loss is the token-weighted mean over the whole minibatch.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/distributed/comm/local_comm.h"
#include "odc/io/hf_checkpoint.h"
#include "odc/model/units.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/run/trainer.h"
#include "unit/synthetic_data.h"

using namespace odc;

namespace {

std::filesystem::path write_dataset() {
  const auto dir = std::filesystem::temp_directory_path() / "odc_trainer_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "data.jsonl";
  // Tests run in parallel and share this file: write a private copy and rename it into place, so
  // a reader never sees a half-written file (the content is always the same).
  const auto tmp = dir / ("data.jsonl." + std::to_string(::getpid()));
  std::ofstream out(tmp);
  out << test::synthetic_jsonl({24, 99, [](int s, test::Lcg&) { return 3 + (s * 7) % 29; }});
  out.close();
  std::filesystem::rename(tmp, path);
  return path;
}

Config make_config(const std::filesystem::path& data, const std::vector<std::string>& extra) {
  Config config(train::trainer_tunables());
  config.apply_assignment("data.train=" + data.string());
  config.apply_assignment(test::tiny_trainer_model());
  config.apply_assignment("data.minibatch_size=6");
  config.apply_assignment("train.steps=3");
  config.apply_assignment("train.warmup_steps=0");
  config.apply_assignment("train.lr=0.001");
  config.apply_assignment("train.peak_flops=1e10");  // skip the start-up sgemm in tests
  for (const auto& e : extra) config.apply_assignment(e);
  config.validate();
  return config;
}

std::vector<float> all_weights(train::Trainer& t) {
  std::vector<float> w;
  for (int u = 0; u < t.store().layout().num_units(); ++u) {
    w.insert(w.end(), t.store().master(u), t.store().master(u) + t.store().shard_size(u));
  }
  return w;
}

}  // namespace

TEST_CASE("microbatch size does not change the minibatch gradient", "[train]") {
  const auto data = write_dataset();
  // Tolerance: the two runs sum the same fp32 terms in a different order (~1e-7 relative); AdamW
  // normalizes each update by its running RMS, which can amplify that round-off for coordinates
  // whose gradient nearly cancels across steps, so weights are compared at 1e-5 of their scale.
  for (const std::string reduction : {"token", "sequence"}) {
    const auto one = make_config(data, {"data.max_tokens_per_microbatch=1000", "train.loss_reduction=" + reduction});
    const auto many = make_config(data, {"data.max_tokens_per_microbatch=31", "train.loss_reduction=" + reduction});
    train::Trainer a(one);
    train::Trainer b(many);
    for (int s = 0; s < 3; ++s) {
      const auto ra = a.step();
      const auto rb = b.step();
      INFO(reduction << " step " << s);
      CHECK(ra.microbatches == 1);
      CHECK(rb.microbatches > 2);
      // Same sums in a different order: fp32 round-off only.
      CHECK(ra.loss == Approx(rb.loss).epsilon(1e-6));
      CHECK(ra.grad_norm == Approx(rb.grad_norm).epsilon(1e-5));
    }
    const auto wa = all_weights(a);
    const auto wb = all_weights(b);
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < wa.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(wa[i] - wb[i])));
      scale = std::max(scale, static_cast<double>(std::abs(wa[i])));
    }
    CHECK(diff / scale < 1e-5);
  }
}

TEST_CASE("the reported loss is the token-weighted mean over the minibatch", "[train]") {
  const auto data = write_dataset();
  const auto config = make_config(data, {"data.max_tokens_per_microbatch=31", "data.shuffle=false"});
  train::Trainer t(config);
  CHECK(t.store().masters_drawn());  // no checkpoint: the random initialization is the start
  // Independent evaluation before the step: sum of per-token NLL over the first 6 sequences.
  model::LlamaModel& m = const_cast<model::LlamaModel&>(t.model());
  distributed::LocalComm comm(t.store());
  auto dataset = data::open_dataset(data.string(), "tokens", 50);
  double nll = 0, targets = 0;
  for (int s = 0; s < 6; ++s) {
    const auto seq = dataset->get(s);
    model::PackedBatch b;
    b.append(seq.tokens.data(), seq.target_mask.data(), static_cast<std::int64_t>(seq.tokens.size()), 1.0f);
    const auto r = m.forward(b, comm, nullptr);
    nll += r.nll_sum;
    targets += r.target_tokens;
  }
  const auto r = t.step();
  CHECK(r.target_tokens == targets);
  CHECK(r.loss == Approx(nll / targets).epsilon(1e-6));
}

TEST_CASE("trainer rejects inputs that cannot train, naming the key", "[train]") {
  const auto data = write_dataset();
  CHECK_THROWS_WITH(train::Trainer(make_config(data, {"data.max_tokens_per_microbatch=20"})),
                    Catch::Contains("sequence 3 has length 24") && Catch::Contains("data.max_tokens_per_microbatch = 20"));
  CHECK_THROWS_WITH(train::Trainer(make_config(data, {"data.minibatch_size=25"})),
                    Catch::Contains("holds only 24"));
  CHECK_THROWS_WITH(train::Trainer(make_config(data, {"data.minibatch_size=", "data.global_batch_size=25"})),
                    Catch::Contains("the global batch is 25 sequences per step (data.global_batch_size)") &&
                        Catch::Contains("holds only 24"));
  CHECK_THROWS_WITH(train::Trainer(make_config(data, {"model.config.vocab_size=40"})),
                    Catch::Contains("out of range [0, 40)"));
}

// A model with the original's sliding window (model.config.attention_window here; a Mistral or
// Qwen2 checkpoint's sliding_window) trains exactly only sequences that fit in it: a longer one is
// refused at start-up, naming it and what to do; data.max_length within the window trains.
TEST_CASE("trainer refuses sequences longer than the model's attention window, before any step", "[train]") {
  const auto data = write_dataset();  // 3, 10, 17, 24, ... tokens
  CHECK_THROWS_WITH(train::Trainer(make_config(data, {"model.config.attention_window=16"})),
                    Catch::Contains(data.string() + ":3: sequence 2 has length 17, longer than the model's attention "
                                                    "window of 16 tokens (model.config.attention_window, from") &&
                        Catch::Contains("set data.max_length to at most 16 with data.over_length truncate or drop"));
  for (const std::string policy : {"truncate", "drop"}) {
    train::Trainer trainer(make_config(data, {"model.config.attention_window=16", "data.max_length=16",
                                              "data.over_length=" + policy, "train.steps=1"}));
    CHECK(trainer.run().size() == 1);
  }
  // data.max_length does not apply to data.eval: its sequences are checked too.
  CHECK_THROWS_WITH(train::Trainer(make_config(data, {"model.config.attention_window=16", "data.max_length=16",
                                                      "data.over_length=drop", "data.eval=" + data.string()})),
                    Catch::Contains("sequence 2 has length 17") &&
                        Catch::Contains("keep data.eval's sequences to at most 16 tokens"));
}

TEST_CASE("the trace holds every unit's forward and backward of every microbatch, and the metrics add up",
          "[train][trace]") {
  const auto data = write_dataset();
  const auto dir = std::filesystem::temp_directory_path() / "odc_trainer_trace_test";
  std::filesystem::remove_all(dir);
  const auto trace_path = dir / "trace.json";
  const auto metrics_path = dir / "metrics.jsonl";
  // Cap 40 tokens: the 6 sequences of a step (3..31 tokens) need several microbatches.
  train::Trainer trainer(make_config(data, {"data.max_tokens_per_microbatch=40", "train.trace_file=" + trace_path.string(),
                                            "train.metrics_file=" + metrics_path.string(), "train.trace_steps=2"}));
  const auto results = trainer.run();
  REQUIRE(results.size() == 3);

  std::ifstream in(trace_path);
  const auto doc = nlohmann::json::parse(in);
  REQUIRE(doc["otherData"]["world_size"] == 1);
  REQUIRE(doc["otherData"]["model"]["num_hidden_layers"] == 2);
  const int units = trainer.model().num_units();  // embedding, 2 layers, head
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<int>> forward, backward, heads;
  std::map<std::int64_t, double> microbatch_tokens;
  int optimizer_steps = 0;
  bool process_named = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") {
      process_named = process_named || (e["name"] == "process_name" && e["args"]["name"] == "rank 0");
      continue;
    }
    REQUIRE(e["ph"] == "X");
    REQUIRE(e["dur"].get<double>() >= 0.0);
    const auto step = e["args"]["step"].get<std::int64_t>();
    REQUIRE(step >= 1);  // 1-based, as the metrics and the progress line number steps
    REQUIRE(step <= 2);  // train.trace_steps
    const std::string cat = e["cat"];
    if (cat == "optimizer") ++optimizer_steps;
    if (cat == "microbatch") microbatch_tokens[step] += e["args"]["tokens"].get<double>();
    if (cat != "forward" && cat != "backward" && cat != "head") continue;
    const auto key = std::make_pair(step, e["args"]["microbatch"].get<std::int64_t>());
    auto& seen = cat == "forward" ? forward : cat == "backward" ? backward : heads;
    seen[key].push_back(static_cast<int>(e["args"]["unit"].get<double>()));
    REQUIRE(e["args"]["tokens"].get<double>() > 0);
    REQUIRE(e["args"]["pairs"].get<double>() >= e["args"]["tokens"].get<double>());
  }
  REQUIRE(process_named);
  REQUIRE(optimizer_steps == 2);
  std::size_t traced_microbatches = 0;
  for (int s = 0; s < 2; ++s) traced_microbatches += static_cast<std::size_t>(results[static_cast<std::size_t>(s)].microbatches);
  REQUIRE(results[0].microbatches > 1);
  REQUIRE(forward.size() == traced_microbatches);
  for (const auto& [key, list] : forward) {
    REQUIRE(list == std::vector<int>{0, 1, 2});                          // units in forward order
    REQUIRE(backward.at(key) == std::vector<int>{2, 1, 0});              // and back
    REQUIRE(heads.at(key) == std::vector<int>{units - 1});
  }
  for (int s = 0; s < 2; ++s) REQUIRE(microbatch_tokens[s + 1] == results[static_cast<std::size_t>(s)].tokens);

  // Metrics: compute + waits = minibatch time <= step time; one rank never waits; MFU positive.
  std::ifstream metrics(metrics_path);
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    const auto m = nlohmann::json::parse(line);
    ++lines;
    const double parts = m["compute_s"].get<double>() + m["wait_gather_s"].get<double>() + m["wait_push_s"].get<double>() +
                         m["wait_barrier_s"].get<double>();
    REQUIRE(parts == Approx(m["minibatch_time_s"].get<double>()).epsilon(1e-9));
    REQUIRE(m["minibatch_time_s"].get<double>() <= m["step_time_s"].get<double>());
    REQUIRE(m["bubble_measured"].get<double>() == 0.0);
    REQUIRE(m["mfu"].get<double>() > 0.0);
    REQUIRE(m["gemm_fraction"].get<double>() == 0.0);  // train.peak_flops: nothing measured
    REQUIRE(m["flops"].get<double>() > 0.0);
  }
  REQUIRE(lines == 3);
}

TEST_CASE("without train.peak_flops the trainer measures the device peak and the GEMM rate", "[train][peak]") {
  const auto data = write_dataset();
  const auto dir = std::filesystem::temp_directory_path() / "odc_trainer_peak_test";
  std::filesystem::remove_all(dir);
  const auto metrics_path = dir / "metrics.jsonl";
  train::Trainer trainer(make_config(data, {"train.peak_flops=0", "train.steps=1",
                                            "train.metrics_file=" + metrics_path.string()}));
  const auto results = trainer.run();
  REQUIRE(results.size() == 1);
  const auto& r = results[0];
  CHECK(r.mfu > 0.0);
  CHECK(std::isfinite(r.gemm_fraction));
  CHECK(r.gemm_fraction > 0.0);
  std::ifstream metrics(metrics_path);
  std::string line;
  REQUIRE(std::getline(metrics, line));
  const auto m = nlohmann::json::parse(line);
  CHECK(m["mfu"].get<double>() == r.mfu);
  CHECK(m["gemm_fraction"].get<double>() == r.gemm_fraction);
}

TEST_CASE("stopping at step 10 and resuming gives bit-identical losses and weights to 20 straight steps",
          "[train][checkpoint]") {
  const auto data = write_dataset();
  const auto dir = std::filesystem::temp_directory_path() / "odc_trainer_resume";
  std::filesystem::remove_all(dir);
  const std::vector<std::string> common = {"train.steps=20", "data.max_tokens_per_microbatch=40",
                                           "train.warmup_steps=3"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return make_config(data, extra);
  };
  train::Trainer straight(with({"checkpoint.resume=never"}));
  const auto all = straight.run();
  REQUIRE(all.size() == 20);

  const std::string ckpt = "checkpoint.dir=" + (dir / "ckpt").string();
  {
    train::Trainer first(with({ckpt, "train.stop_at_step=10", "checkpoint.every=4"}));
    const auto part = first.run();
    REQUIRE(part.size() == 10);
    REQUIRE(first.resumed_from().empty());
  }
  REQUIRE(std::filesystem::exists(dir / "ckpt" / "step-00000010"));
  REQUIRE(std::filesystem::exists(dir / "ckpt" / "step-00000008"));
  {
    // (Scoped: a trainer holds its checkpoint directory's lock until it is destroyed.)
    train::Trainer second(with({ckpt}));
    REQUIRE(second.steps_done() == 10);
    REQUIRE_FALSE(second.resumed_from().empty());
    const auto rest = second.run();
    REQUIRE(rest.size() == 10);
    for (std::size_t i = 0; i < 10; ++i) {
      INFO("step " << i + 11);
      REQUIRE(rest[i].step == all[i + 10].step);
      REQUIRE(rest[i].loss == all[i + 10].loss);  // bitwise: one rank, same order of every sum
      REQUIRE(rest[i].grad_norm == all[i + 10].grad_norm);
    }
    REQUIRE(all_weights(second) == all_weights(straight));
  }

  // A checkpoint of other data is refused rather than silently continued.
  const auto other = std::filesystem::temp_directory_path() / "odc_trainer_resume_other.jsonl";
  {
    std::ifstream in(data);
    std::ofstream out(other);
    std::string line;
    for (int i = 0; std::getline(in, line) && i < 20; ++i) out << line << '\n';
  }
  REQUIRE_THROWS_WITH(train::Trainer(make_config(other, {ckpt, "train.steps=20", "data.max_tokens_per_microbatch=40"})),
                      Catch::Contains("different data") && Catch::Contains("checkpoint.resume: never"));
}

TEST_CASE("a resumed run needs no base weights: model.checkpoint moved away, the resume continues bit for bit",
          "[train][checkpoint]") {
  const auto data = write_dataset();
  const auto dir = std::filesystem::temp_directory_path() / ("odc_trainer_nobase_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  model::LlamaConfig hf;
  hf.vocab_size = 50;
  hf.hidden_size = 32;
  hf.intermediate_size = 48;
  hf.num_hidden_layers = 2;
  hf.num_attention_heads = 4;
  hf.num_key_value_heads = 2;
  hf.head_dim = 8;
  hf.max_position_embeddings = 256;
  const auto units = model::build_unit_layouts(hf);
  const std::string base = (dir / "base").string();
  io::write_hf_checkpoint(base, hf, "LlamaForCausalLM", DType::f32, [&](int u, float* out) {
    const auto& unit = units[static_cast<std::size_t>(u)];
    model::init_unit_range(unit, hf, 7, 0, unit.numel, out);
  });
  auto config = [&](const std::vector<std::string>& extra) {
    Config c(train::trainer_tunables());
    for (const auto& e : {"data.train=" + data.string(), "model.checkpoint=" + base, std::string("data.minibatch_size=6"),
                          std::string("train.steps=6"), std::string("train.warmup_steps=0"), std::string("train.lr=0.001"),
                          std::string("train.peak_flops=1e10"), std::string("data.max_tokens_per_microbatch=40")}) {
      c.apply_assignment(e);
    }
    for (const auto& e : extra) c.apply_assignment(e);
    c.validate();
    return c;
  };
  const std::string ckpt = "checkpoint.dir=" + (dir / "ckpt").string();
  train::Trainer straight(config({"checkpoint.resume=never"}));
  const auto all = straight.run();
  // Nothing drawn that the load overwrites: the store drew no random weights, so model.seed (the
  // random initialization's) changes nothing of a run from model.checkpoint, bit for bit.
  CHECK_FALSE(straight.store().masters_drawn());
  {
    train::Trainer reseeded(config({"checkpoint.resume=never", "model.seed=99"}));
    CHECK_FALSE(reseeded.store().masters_drawn());
    const auto same = reseeded.run();
    REQUIRE(same.size() == all.size());
    for (std::size_t i = 0; i < all.size(); ++i) CHECK(same[i].loss == all[i].loss);
  }
  {
    train::Trainer first(config({ckpt, "train.stop_at_step=3"}));
    REQUIRE(first.run().size() == 3);
  }
  std::filesystem::rename(base, base + "-moved");
  {
    train::Trainer second(config({ckpt}));
    REQUIRE(second.steps_done() == 3);
    CHECK_FALSE(second.store().masters_drawn());  // the resume fills the store
    const auto rest = second.run();
    REQUIRE(rest.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) REQUIRE(rest[i].loss == all[i + 3].loss);  // bitwise: one rank
    REQUIRE(all_weights(second) == all_weights(straight));
  }
  // Without the base, a fresh start has nothing to start from: the error names what is missing.
  REQUIRE_THROWS_WITH(train::Trainer(config({"checkpoint.resume=never"})),
                      Catch::Contains("model.checkpoint: cannot read '" + base + "/config.json'"));
  std::filesystem::remove_all(dir);
}

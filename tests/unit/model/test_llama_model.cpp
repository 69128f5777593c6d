// LlamaModel properties that do not need the PyTorch oracle: packing is exact, the unit access
// pattern is what sharded comms rely on, and activation memory reaches a steady state.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/llama_model.h"

#include "call_log.h"
#include "unit/synthetic_data.h"

using namespace odc;

namespace {

// qwen3: q/k norms, with head_dim 10 (q 40 wide where hidden_size is 24).
model::LlamaConfig tiny_config(bool tied = false, bool qwen3 = false) {
  nlohmann::json j = {{"vocab_size", 37},         {"hidden_size", 24},       {"intermediate_size", 40},
                      {"num_hidden_layers", 2},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"rms_norm_eps", 1e-5},     {"tie_word_embeddings", tied}, {"attention_bias", tied}};
  if (qwen3) {
    j["model_type"] = "qwen3";
    j["head_dim"] = 10;
  }
  return model::LlamaConfig::from_json(j, "test", true);
}

// The shapes the model tests run: plain, tied embeddings with q/k/v biases, Qwen3's q/k norms.
struct Variant {
  bool tied, qwen3;
};
constexpr Variant kVariants[] = {{false, false}, {true, false}, {false, true}};

using Seq = test::SyntheticSequence;

std::vector<Seq> sequences(std::int64_t vocab) {
  std::vector<Seq> out;
  test::Lcg rng(12345);
  for (int len : {9, 1, 17, 5}) {  // a prompt prefix (a third) is masked out
    out.push_back(test::synthetic_sequence(rng, len, static_cast<std::uint32_t>(vocab), 8, 3));
  }
  return out;
}

// Gradient of every unit (full, world of one), after one microbatch per entry of `batches`.
std::vector<std::vector<float>> grads_after(model::LlamaModel& m, distributed::ShardStore& store,
                                            const std::vector<model::PackedBatch>& batches, double* loss) {
  distributed::LocalComm comm(store);
  comm.begin_minibatch();
  *loss = 0;
  for (const auto& b : batches) *loss += m.train_microbatch(b, comm, comm).weighted_loss;
  std::vector<std::vector<float>> g;
  for (int u = 0; u < m.num_units(); ++u) g.emplace_back(store.grad(u), store.grad(u) + store.shard_size(u));
  return g;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

using RecordingComm = test::CallLog;

}  // namespace

TEST_CASE("packing is exact: a packed microbatch equals its sequences run one at a time", "[model]") {
  for (const auto [tied, qwen3] : kVariants) {
    const auto config = tiny_config(tied, qwen3);
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    distributed::ShardLayout layout(m.units(), 1, 0);
    distributed::ShardStore store(layout, m.units(), config, 7);
    const auto seqs = sequences(config.vocab_size);

    model::PackedBatch packed;
    std::vector<model::PackedBatch> singles;
    for (const auto& s : seqs) {
      packed.append(s.tokens.data(), s.mask.data(), static_cast<std::int64_t>(s.tokens.size()), 0.1f);
      model::PackedBatch one;
      one.append(s.tokens.data(), s.mask.data(), static_cast<std::int64_t>(s.tokens.size()), 0.1f);
      singles.push_back(std::move(one));
    }
    double loss_packed = 0, loss_singles = 0;
    const auto g_packed = grads_after(m, store, {packed}, &loss_packed);
    const auto g_singles = grads_after(m, store, singles, &loss_singles);
    // fp32 sums in a different order: agreement to a few ulps of the gradient scale.
    CHECK(loss_packed == Approx(loss_singles).epsilon(1e-6));
    CHECK(loss_packed > 0.1);
    for (std::size_t u = 0; u < g_packed.size(); ++u) {
      INFO("tied " << tied << " qwen3 " << qwen3 << " unit " << u);
      CHECK(max_rel_diff(g_packed[u], g_singles[u]) < 1e-5);
    }

    // Per-sequence losses: weight only one sequence's targets inside the packed batch.
    distributed::LocalComm comm(store);
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      model::PackedBatch masked;
      for (std::size_t o = 0; o < seqs.size(); ++o) {
        masked.append(seqs[o].tokens.data(), seqs[o].mask.data(), static_cast<std::int64_t>(seqs[o].tokens.size()),
                      o == s ? 1.0f : 0.0f);
      }
      const double in_pack = m.forward(masked, comm, nullptr).weighted_loss;
      const double alone = m.forward(singles[s], comm, nullptr).weighted_loss / 0.1;
      INFO("sequence " << s);
      CHECK(in_pack == Approx(alone).epsilon(1e-6).margin(1e-7));
    }
  }
}

TEST_CASE("the model fetches every unit before use and hands off every gradient once", "[model]") {
  for (const auto [tied, qwen3] : kVariants) {
    const auto config = tiny_config(tied, qwen3);
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    distributed::ShardLayout layout(m.units(), 1, 0);
    distributed::ShardStore store(layout, m.units(), config, 1);
    RecordingComm rec(store);
    const auto seqs = sequences(config.vocab_size);
    model::PackedBatch b;
    b.append(seqs[0].tokens.data(), seqs[0].mask.data(), static_cast<std::int64_t>(seqs[0].tokens.size()), 1.0f);
    m.train_microbatch(b, rec, rec);
    const std::vector<std::string> untied = {"A0", "R0", "A1", "R1", "A2", "R2", "A3", "G3", "P3", "R3",
                                             "A2", "G2", "P2", "R2", "A1", "G1", "P1", "R1", "G0", "P0"};
    const std::vector<std::string> tied_order = {"A0", "A1", "R1", "A2", "R2", "A3", "G3", "G0", "P3", "R3",
                                                 "R0", "A2", "G2", "P2", "R2", "A1", "G1", "P1", "R1", "P0"};
    CHECK(rec.log == (tied ? tied_order : untied));

    // An empty microbatch (a padding microbatch of the collective baseline) makes the same calls.
    rec.log.clear();
    model::PackedBatch empty;
    m.train_microbatch(empty, rec, rec);
    CHECK(rec.log == (tied ? tied_order : untied));
  }
}

TEST_CASE("activation memory reaches a steady state across microbatches", "[model]") {
  for (const bool qwen3 : {false, true}) {  // Qwen3: the q/k norms' saved inputs and statistics too
    INFO("qwen3 " << qwen3);
    const auto config = tiny_config(false, qwen3);
    model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
    distributed::ShardLayout layout(m.units(), 1, 0);
    distributed::ShardStore store(layout, m.units(), config, 3);
    distributed::LocalComm comm(store);
    const auto seqs = sequences(config.vocab_size);
    model::PackedBatch big, small;
    for (const auto& s : seqs) big.append(s.tokens.data(), s.mask.data(), static_cast<std::int64_t>(s.tokens.size()), 1.0f);
    small.append(seqs[0].tokens.data(), seqs[0].mask.data(), static_cast<std::int64_t>(seqs[0].tokens.size()), 1.0f);
    m.train_microbatch(big, comm, comm);
    const auto steady = m.activation_bytes();
    CHECK(steady > 0);
    for (int i = 0; i < 5; ++i) {
      m.train_microbatch(small, comm, comm);
      m.train_microbatch(big, comm, comm);
      CHECK(m.activation_bytes() == steady);
    }
  }
}

TEST_CASE("out-of-range token ids are rejected before any computation", "[model]") {
  const auto config = tiny_config();
  model::LlamaModel m(config, std::make_unique<backend::CpuBackend>());
  distributed::ShardLayout layout(m.units(), 1, 0);
  distributed::ShardStore store(layout, m.units(), config, 3);
  distributed::LocalComm comm(store);
  std::vector<std::int32_t> tokens = {1, 2, 37, 4};
  model::PackedBatch b;
  b.append(tokens.data(), nullptr, 4, 1.0f);
  REQUIRE_THROWS_WITH(m.train_microbatch(b, comm, comm), Catch::Contains("token id 37") && Catch::Contains("[0, 37)"));
}

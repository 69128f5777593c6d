// UnitBufferPool over a scripted transport: which transfers it starts and waits for, in which
// order, what it hands the model, and the protocol errors it refuses.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/backend/backend_factory.h"
#include "odc/distributed/comm/unit_buffer_pool.h"
#include "odc/model/llama_model.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"
#include "unit/tiny_model.h"

using namespace odc;
using distributed::UnitBufferPool;

namespace {


// Fills gathered buffers with the unit's number; transfers finish only when the test says so
// (`done`), or when waited for. Every call is logged.
class ScriptedTransport final : public distributed::UnitTransport {
 public:
  explicit ScriptedTransport(const distributed::ShardLayout& layout) : layout_(layout) {}
  void start_gather(int unit, int buffer, float* full) override {
    log.push_back("gather " + std::to_string(unit) + "@" + std::to_string(buffer));
    for (std::int64_t i = 0; i < layout_.unit(unit).padded; ++i) full[i] = static_cast<float>(unit);
  }
  bool gather_done(int) override { return done; }
  void wait_gather(int unit, int buffer) override {
    log.push_back("wait gather " + std::to_string(unit) + "@" + std::to_string(buffer));
  }
  void start_push(int unit, int buffer, const float* full) override {
    log.push_back("push " + std::to_string(unit) + "@" + std::to_string(buffer));
    pushed_first_value.push_back(full[0]);
  }
  bool push_done(int) override { return done; }
  void wait_push(int unit, int buffer) override {
    log.push_back("wait push " + std::to_string(unit) + "@" + std::to_string(buffer));
  }
  void finish_push(int unit, int buffer) override {
    log.push_back("finish " + std::to_string(unit) + "@" + std::to_string(buffer));
  }
  bool done = false;
  std::vector<std::string> log;
  std::vector<float> pushed_first_value;

 private:
  const distributed::ShardLayout& layout_;
};

struct Fixture {
  model::LlamaConfig config = test::tiny_model(3);
  std::vector<model::UnitLayout> units = model::build_unit_layouts(config);
  distributed::ShardLayout layout{units, 2, 0};
  ScriptedTransport transport{layout};
  UnitBufferPool pool{layout, transport};
};

}  // namespace

TEST_CASE("unit buffer pool: a prefetched unit is gathered once, waited for at acquire, and dropped at release",
          "[distributed]") {
  Fixture f;
  f.pool.prefetch(1);
  f.pool.prefetch(1);  // already arriving: no second gather
  const float* w = f.pool.acquire(1);
  CHECK(w[0] == 1.0f);
  CHECK(f.transport.log == std::vector<std::string>{"gather 1@0", "wait gather 1@0"});
  CHECK(f.pool.waits().gather_s >= 0.0);
  f.pool.release(1);
  // Released weights are gone (FSDP's reshard after forward): the next acquire gathers again.
  f.transport.log.clear();
  f.transport.done = true;  // completed transfers are still waited for (to report their errors)
  f.pool.acquire(1);
  CHECK(f.transport.log == std::vector<std::string>{"gather 1@0", "wait gather 1@0"});
  f.pool.release(1);
  // Out-of-range hints (past the last unit) are ignored.
  f.pool.prefetch(-1);
  f.pool.prefetch(static_cast<int>(f.units.size()));
  CHECK(f.transport.log.size() == 2);
}

TEST_CASE("unit buffer pool: prefetch only uses a free buffer, with all held, acquire gathers on demand", "[distributed]") {
  Fixture f;
  f.pool.acquire(0);
  f.pool.acquire(1);
  f.pool.prefetch(2);  // the third and last buffer
  f.pool.prefetch(3);  // none free: ignored
  CHECK(f.transport.log == std::vector<std::string>{"gather 0@0", "wait gather 0@0", "gather 1@1", "wait gather 1@1",
                                                    "gather 2@2"});
  CHECK_THROWS_WITH(f.pool.acquire(3), Catch::Contains("no free weight buffer for unit 3"));
  CHECK_THROWS_WITH(f.pool.acquire(0), Catch::Contains("unit 0 acquired twice"));
  CHECK_THROWS_WITH(f.pool.release(4), Catch::Contains("release of unit 4 that is not acquired"));
}

TEST_CASE("unit buffer pool: gradient buffers are zeroed, pushed once, and reused only after their push", "[distributed]") {
  Fixture f;
  float* g = f.pool.grad_buffer(4);
  for (std::int64_t i = 0; i < f.layout.unit(4).padded; ++i) CHECK(g[i] == 0.0f);
  g[0] = 2.5f;
  CHECK_THROWS_WITH(f.pool.grad_buffer(4), Catch::Contains("gradient buffer of unit 4 requested twice"));
  f.pool.push_grad(4);
  CHECK(f.transport.pushed_first_value == std::vector<float>{2.5f});
  CHECK_THROWS_WITH(f.pool.push_grad(4), Catch::Contains("push of unit 4 without an open gradient buffer"));
  // Three pushes in flight fill the pool; the fourth buffer request waits for one of them and
  // completes it (finish_push) before zeroing it for the new unit.
  f.pool.grad_buffer(3)[0] = 1.0f;
  f.pool.push_grad(3);
  f.pool.grad_buffer(2);
  f.pool.push_grad(2);
  f.transport.log.clear();
  float* reused = f.pool.grad_buffer(1);
  CHECK(reused[0] == 0.0f);
  // The buffer that fits best (unit 3's: a layer's, as unit 1) is waited for.
  CHECK(f.transport.log == std::vector<std::string>{"wait push 3@1", "finish 3@1"});
  // At the minibatch end every push still in flight is waited for and finished, in buffer order.
  f.pool.push_grad(1);
  f.transport.log.clear();
  f.pool.drain();
  CHECK(f.transport.log == std::vector<std::string>{"wait push 4@0", "finish 4@0", "wait push 1@1", "finish 1@1",
                                                    "wait push 2@2", "finish 2@2"});
  f.pool.check_idle();
}

TEST_CASE("unit buffer pool: an idle buffer is preferred over waiting for a push", "[distributed]") {
  Fixture f;
  f.pool.grad_buffer(4);
  f.pool.push_grad(4);  // buffer 0 pushing
  f.transport.log.clear();
  f.pool.grad_buffer(3);  // buffer 1 is idle: no wait
  CHECK(f.transport.log.empty());
}

TEST_CASE("unit buffer pool: the minibatch boundaries refuse open or held buffers", "[distributed]") {
  Fixture f;
  f.pool.grad_buffer(2);
  CHECK_THROWS_WITH(f.pool.drain(), Catch::Contains("gradient of unit 2 never pushed"));
  Fixture g;
  g.pool.acquire(1);
  CHECK_THROWS_WITH(g.pool.check_idle(), Catch::Contains("weights of unit 1 still held at minibatch start"));
  // A prefetch the model never acquired is completed by the drain, so nothing crosses the step.
  Fixture h;
  h.pool.prefetch(2);
  h.pool.drain();
  CHECK(h.transport.log == std::vector<std::string>{"gather 2@0", "wait gather 2@0"});
  h.pool.check_idle();
  CHECK(h.pool.waits().barrier_s >= 0.0);
}

namespace {

// The model's ParamSource / GradSink calls, served by the pool (as a ShardedComm serves them).
class PoolParams final : public model::ParamSource, public model::GradSink {
 public:
  explicit PoolParams(UnitBufferPool& pool) : pool_(pool) {}
  const float* acquire(int unit) override { return pool_.acquire(unit); }
  void release(int unit) override { pool_.release(unit); }
  void prefetch(int unit) override { pool_.prefetch(unit); }
  float* grad_buffer(int unit) override { return pool_.grad_buffer(unit); }
  void push_grad(int unit) override { pool_.push_grad(unit); }

 private:
  UnitBufferPool& pool_;
};

}  // namespace

TEST_CASE("unit buffer pool: buffers are sized by what they hold: one embedding-sized, the rest layer-sized",
          "[distributed]") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    // A vocabulary that makes the embedding (and the untied head) ~30x a decoder layer, as in
    // LLaMA-3 at 128K tokens: every buffer at the largest unit would be ~3x what is needed.
    model::LlamaConfig config = test::tiny_model(4);
    config.vocab_size = 4096;
    config.hidden_size = 32;
    config.intermediate_size = 64;
    config.head_dim = 16;
    config.tie_word_embeddings = tied;
    const auto units = model::build_unit_layouts(config);
    const distributed::ShardLayout layout(units, 2, 0);
    ScriptedTransport transport(layout);
    transport.done = true;
    UnitBufferPool pool(layout, transport);
    model::LlamaModel model(config, backend::make_backend("cpu", DType::f32, 1, 0));
    PoolParams params(pool);
    model::PackedBatch batch;
    std::vector<std::int32_t> tokens(40);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 37) % 4096);
    batch.append(tokens.data(), nullptr, 24, 1.0f / 24);
    batch.append(tokens.data() + 24, nullptr, 16, 1.0f / 16);
    for (int microbatch = 0; microbatch < 3; ++microbatch) {
      pool.check_idle();
      model.train_microbatch(batch, params, params);
      pool.drain();
    }
    // The plan is what the buffers grow to (untied), or a bound (tied: the head unit is only the
    // final norm, and one buffer may never hold more than it).
    const std::int64_t largest = layout.largest_padded_unit();
    std::int64_t layer = 0;
    for (int u = 1; u + 1 < layout.num_units(); ++u) layer = std::max(layer, layout.unit(u).padded);
    CHECK(UnitBufferPool::planned_floats(layout) == 2 * (largest + 2 * layer));
    CHECK(pool.allocated_floats() <= UnitBufferPool::planned_floats(layout));
    CHECK(pool.allocated_floats() >= UnitBufferPool::planned_floats(layout) - layer);
    if (!tied) CHECK(pool.allocated_floats() == UnitBufferPool::planned_floats(layout));
    CHECK(pool.allocated_floats() < 3 * largest);  // against 6 x the largest unit before
  }
}

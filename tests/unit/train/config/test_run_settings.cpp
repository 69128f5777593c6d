// RunSettings (run_settings.h): every key a run reads, resolved once from the config — the
// declared defaults, overrides, the comm's options built in one place (and the memory plan's
// inputs taken from them), and each refusal with its message.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/core/error.h"
#include "odc/core/thread_limit.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/config/run_settings.h"

using namespace odc;
using Catch::Matchers::Contains;
using distributed::CommKind;
using distributed::GatherDtype;
using distributed::GatherProtocol;
using distributed::TransportKind;

namespace {

Config config_with(const std::vector<std::string>& assignments) {
  Config config(train::trainer_tunables());
  for (const auto& a : assignments) config.apply_assignment(a);
  return config;
}

// The trainer's tunables with `path`'s list of choices dropped: a value the config would refuse
// on loading reaches resolve_run_settings, whose parse must refuse it itself.
Config config_without_choices(const std::string& path, const std::string& value) {
  auto specs = train::trainer_tunables();
  auto it = std::find_if(specs.begin(), specs.end(), [&](const TunableSpec& s) { return s.path == path; });
  REQUIRE(it != specs.end());
  REQUIRE(!it->choices.empty());
  it->choices.clear();
  Config config(std::move(specs));
  config.apply_assignment(path + "=" + value);
  return config;
}

std::size_t occurrences(const std::string& text, const std::string& word) {
  std::size_t count = 0;
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + word.size())) ++count;
  return count;
}

// The message of the odc::Error `resolve` throws ("" when none).
template <typename F>
std::string error_of(F&& resolve) {
  try {
    resolve();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

model::LlamaConfig small_model() {
  model::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 256;
  return c;
}

}  // namespace

TEST_CASE("run settings: the declared defaults", "[train][settings]") {
  const auto s = train::resolve_run_settings(config_with({}));
  // model
  CHECK(s.model.checkpoint.empty());
  CHECK(s.model.device == "cpu");
  CHECK(s.model.device_kind() == DeviceKind::cpu);
  CHECK(s.model.dtype == DType::f32);
  CHECK(s.model.attention == "auto");
  CHECK(s.model.cudnn_workspace_mib == kernels::kCudnnWorkspaceLimitMiB);
  CHECK(s.model.seed == 0);
  // train
  CHECK(s.train.threads == 1);
  CHECK(s.train.sharding == distributed::Sharding::full);
  CHECK(s.train.recompute == model::Recompute::none);
  CHECK(s.train.beta1 == 0.9);
  CHECK(s.train.beta2 == 0.95);
  CHECK(s.train.eps == 1.0e-8);
  CHECK(s.train.weight_decay == 0.01);
  CHECK(s.train.grad_clip == 1.0);
  CHECK(s.train.peak_flops == 0.0);
  CHECK(s.train.memory_budget_gib == 0.0);
  CHECK(s.train.trace_file.empty());
  CHECK(s.train.trace_steps == 20);
  CHECK(s.train.stop_at_step == 0);
  // data
  CHECK(s.data.format == "tokens");
  CHECK(s.data.tokenizer.empty());
  CHECK_FALSE(s.data.auto_token_cap);
  CHECK(s.data.max_tokens_per_microbatch == 0);
  // comm: train.comm, comm.*, debug.host_staging
  CHECK(s.comm.kind == CommKind::odc);
  CHECK(s.comm.transport.chunk_bytes == 1048576);
  CHECK(s.comm.transport.network_chunk_bytes == 4194304);
  CHECK(s.comm.transport.max_inflight == 8);
  CHECK(s.comm.transport.timeout_s == 600.0);
  CHECK(s.comm.transport.direct_load);
  CHECK(s.comm.transport.gather_protocol == GatherProtocol::automatic);
  CHECK_FALSE(s.comm.deterministic);
  CHECK(s.comm.odc_transport == TransportKind::automatic);
  CHECK(s.comm.gather_dtype == GatherDtype::f32);
  CHECK_FALSE(s.comm.host_staging);
  // checkpoint, debug
  CHECK(s.checkpoint.dir.empty());
  CHECK(s.checkpoint.resume == "auto");
  CHECK(s.checkpoint.export_hf.empty());
  CHECK(s.debug.ranks_per_host == 0);
  CHECK(s.debug.slow_rank == -1);
  CHECK(s.debug.delay_ms == 0.0);
}

TEST_CASE("run settings: overrides reach every section", "[train][settings]") {
  const auto s = train::resolve_run_settings(config_with(
      {"model.checkpoint=/models/base", "model.device=cuda", "model.dtype=bfloat16", "model.attention=native",
       "model.cudnn_workspace_mib=4096", "model.seed=42", "train.threads=2", "train.sharding=hybrid", "train.recompute=selective", "train.beta1=0.8",
       "train.beta2=0.99", "train.eps=1e-6", "train.weight_decay=0.1", "train.grad_clip=0.5", "train.peak_flops=1e12",
       "train.memory_budget_gib=3", "train.trace_file=/tmp/t.json", "train.trace_steps=5", "train.stop_at_step=7",
       "data.format=chat", "data.tokenizer=/tok.json", "data.max_tokens_per_microbatch=512", "train.comm=collective",
       "comm.chunk_bytes=65536", "comm.network_chunk_bytes=131072", "comm.max_inflight=3", "comm.timeout_s=12.5",
       "comm.direct_load=false", "comm.gather_protocol=request", "comm.deterministic=true", "comm.transport=ipc",
       "comm.gather_dtype=bf16", "debug.host_staging=true", "checkpoint.dir=/ck", "checkpoint.resume=never",
       "checkpoint.export_hf=/out", "debug.ranks_per_host=2", "debug.slow_rank=1", "debug.delay_ms=25"}));
  CHECK(s.model.checkpoint == "/models/base");
  CHECK(s.model.device_kind() == DeviceKind::cuda);
  CHECK(s.model.dtype == DType::bf16);
  CHECK(s.model.attention == "native");
  CHECK(s.model.cudnn_workspace_mib == 4096);
  CHECK(s.model.seed == 42);
  CHECK(s.train.threads == 2);
  CHECK(s.train.sharding == distributed::Sharding::hybrid);
  CHECK(s.train.recompute == model::Recompute::selective);
  CHECK(s.train.beta1 == 0.8);
  CHECK(s.train.beta2 == 0.99);
  CHECK(s.train.eps == 1e-6);
  CHECK(s.train.weight_decay == 0.1);
  CHECK(s.train.grad_clip == 0.5);
  CHECK(s.train.peak_flops == 1e12);
  CHECK(s.train.memory_budget_gib == 3.0);
  CHECK(s.train.trace_file == "/tmp/t.json");
  CHECK(s.train.trace_steps == 5);
  CHECK(s.train.stop_at_step == 7);
  CHECK(s.data.format == "chat");
  CHECK(s.data.tokenizer == "/tok.json");
  CHECK_FALSE(s.data.auto_token_cap);
  CHECK(s.data.max_tokens_per_microbatch == 512);
  CHECK(s.comm.kind == CommKind::collective);
  CHECK(s.comm.transport.chunk_bytes == 65536);
  CHECK(s.comm.transport.network_chunk_bytes == 131072);
  CHECK(s.comm.transport.max_inflight == 3);
  CHECK(s.comm.transport.timeout_s == 12.5);
  CHECK_FALSE(s.comm.transport.direct_load);
  CHECK(s.comm.transport.gather_protocol == GatherProtocol::request);
  CHECK(s.comm.deterministic);
  CHECK(s.comm.odc_transport == TransportKind::ipc);
  CHECK(s.comm.gather_dtype == GatherDtype::bf16);
  CHECK(s.comm.host_staging);
  CHECK(s.checkpoint.dir == "/ck");
  CHECK(s.checkpoint.resume == "never");
  CHECK(s.checkpoint.export_hf == "/out");
  CHECK(s.debug.ranks_per_host == 2);
  CHECK(s.debug.slow_rank == 1);
  CHECK(s.debug.delay_ms == 25.0);

  // data.max_tokens_per_microbatch: auto is a flag, not a number (the memory plan resolves it).
  const auto automatic = train::resolve_run_settings(config_with({"data.max_tokens_per_microbatch=auto"}));
  CHECK(automatic.data.auto_token_cap);
  CHECK(automatic.data.max_tokens_per_microbatch == 0);
}

TEST_CASE("run settings: the memory plan's inputs are the comm options' values", "[train][settings][memory]") {
  const auto s = train::resolve_run_settings(
      config_with({"train.comm=collective", "comm.chunk_bytes=65536", "comm.max_inflight=3", "comm.direct_load=false",
                   "comm.deterministic=true", "comm.transport=ipc", "comm.gather_dtype=bf16", "model.dtype=bfloat16",
                   "debug.host_staging=true", "train.sharding=hpz", "train.recompute=full", "model.device=cuda"}));
  const auto in = train::memory_inputs(s, small_model(), 4, 1024, true);
  CHECK(in.world == 4);
  CHECK(in.tokens == 1024);
  CHECK(in.device == DeviceKind::cuda);
  CHECK(in.compute == DType::bf16);
  CHECK(in.recompute == model::Recompute::full);
  CHECK(in.comm == CommKind::collective);
  CHECK(in.transport == TransportKind::ipc);
  CHECK(in.gather == GatherDtype::bf16);
  CHECK(in.deterministic);
  CHECK(in.host_staging);
  CHECK(in.launched_with_mpi);
  CHECK(in.chunk_bytes == 65536);
  CHECK(in.max_inflight == 3);
  CHECK_FALSE(in.direct_load);
  CHECK(in.sharding == "hpz");
  // A change of the settings' comm options is what the plan sees (no second reading of the keys).
  auto changed = s;
  changed.comm.transport.chunk_bytes = 4096;
  changed.comm.kind = CommKind::odc;
  const auto again = train::memory_inputs(changed, small_model(), 4, 1024, true);
  CHECK(again.chunk_bytes == 4096);
  CHECK(again.comm == CommKind::odc);
  // train.memory_budget_gib from the settings: 1.5 GiB exactly; else 95% of the capacity.
  CHECK(train::memory_budget(train::resolve_run_settings(config_with({"train.memory_budget_gib=1.5"})), 1000) ==
        1610612736LL);
  CHECK(train::memory_budget(s, 2000) == 1900);
}

TEST_CASE("run settings: train.threads beyond 4 x this machine's hardware threads", "[train][settings]") {
  const std::int64_t too_many = max_compute_threads() + 1;
  if (too_many > kMaxComputeThreads) {
    WARN("this machine's limit is the declared maximum: the config itself refuses more");
    return;
  }
  const Config config = config_with({"train.threads=" + std::to_string(too_many)});
  REQUIRE_THROWS_WITH(train::resolve_run_settings(config),
                      Contains("train.threads = " + std::to_string(too_many) + " is more than 4 x the") &&
                          Contains("hardware threads of this machine (at most " +
                                   std::to_string(max_compute_threads())));
  // Planned for another machine (--plan-memory, --dump-config): not checked here.
  CHECK(train::resolve_run_settings(config, false).train.threads == too_many);
  CHECK(train::resolve_run_settings(config_with({"train.threads=" + std::to_string(max_compute_threads())}))
            .train.threads == max_compute_threads());
}

TEST_CASE("run settings: comm.gather_dtype bf16 needs model.dtype bfloat16 for the backend", "[train][settings]") {
  const auto fp32 = train::resolve_run_settings(config_with({"comm.gather_dtype=bf16"}));
  REQUIRE_THROWS_WITH(train::training_backend(fp32, 0),
                      Contains("comm.gather_dtype bf16 rounds the gathered weights to bf16, but model.dtype float32 "
                               "computes with them unrounded"));
  const auto bf16 = train::resolve_run_settings(config_with({"comm.gather_dtype=bf16", "model.dtype=bfloat16"}));
  const auto backend = train::training_backend(bf16, 0);
  REQUIRE(backend != nullptr);
  // model.device cpu: the CPU backend in its bf16 mode (it rounds where the CUDA path rounds).
  const auto* cpu = dynamic_cast<const backend::CpuBackend*>(backend.get());
  REQUIRE(cpu != nullptr);
  CHECK(cpu->compute_dtype() == DType::bf16);
}

TEST_CASE("run settings: a value no parser knows is refused, named once", "[train][settings]") {
  struct Case {
    std::string path, value, message;
  };
  const std::vector<Case> cases = {
      {"train.comm", "nccl", "unknown comm 'nccl': expected odc or collective"},
      {"train.sharding", "zero3", "unknown train.sharding 'zero3': expected full, hybrid or hpz"},
      {"train.recompute", "half", "train.recompute: unknown recomputation 'half': expected none, selective or full"},
      {"model.dtype", "float8", "unknown dtype 'float8'"},
      {"comm.gather_protocol", "put", "unknown comm.gather_protocol 'put': expected auto, get or request"},
      {"comm.transport", "tcp", "unknown comm.transport 'tcp': expected auto, ucx or ipc"},
      {"comm.gather_dtype", "int8", "unknown comm.gather_dtype 'int8': expected fp32 or bf16"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.path, c.value);
    const Config config = config_without_choices(c.path, c.value);
    const std::string message = error_of([&] { (void)train::resolve_run_settings(config); });
    CHECK_THAT(message, Contains(c.message));
    // One parse, one mention: the value is not read (and refused) a second time.
    CHECK(occurrences(message, "'" + c.value + "'") == 1);
  }
}

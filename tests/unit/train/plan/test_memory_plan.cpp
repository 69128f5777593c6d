// The memory plan's arithmetic: each item against the component it predicts (the shard layout,
// model::activation_bytes, the unit buffer pool's sizes), the choice of items per device and comm,
// the largest cap that fits, the budget and the refusal, and data.max_tokens_per_microbatch's
// "auto" word. (The prediction against the measured resident set: tests/cli/test_memory_plan.sh.)
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/data_config.h"
#include "odc/distributed/comm/comm_buffers.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/distributed/comm/unit_buffer_pool.h"
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cudnn_ragged.h"
#include "odc/model/units.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/plan/memory_plan.h"
#include "odc/train/checkpoint/model_export.h"
#include "odc/train/config/run_settings.h"

using namespace odc;
using Catch::Matchers::Contains;

namespace {

model::LlamaConfig small_model(bool tied = false) {
  model::LlamaConfig c;
  c.vocab_size = 1000;
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.tie_word_embeddings = tied;
  return c;
}

const train::MemoryItem* find(const train::MemoryPlan& plan, const std::string& name) {
  for (const auto& item : plan.items) {
    if (item.name == name) return &item;
  }
  return nullptr;
}

Config config_with(const std::vector<std::string>& assignments) {
  Config config(train::trainer_tunables());
  for (const auto& a : assignments) config.apply_assignment(a);
  return config;
}

// The settings the memory plan reads (run_settings.h).
train::RunSettings settings_with(const std::vector<std::string>& assignments) {
  return train::resolve_run_settings(config_with(assignments), false);
}

}  // namespace

TEST_CASE("memory plan: one CPU rank holds the state and the activations, nothing else", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 700;
  const auto plan = train::plan_memory(in);
  const distributed::ShardLayout layout(model::build_unit_layouts(in.model), 1, 0);
  REQUIRE(layout.owned_elements() == in.model.num_parameters());
  REQUIRE(find(plan, "optimizer state")->bytes == 16 * in.model.num_parameters());
  const auto act = model::activation_bytes(in.model, DType::f32, 700, model::Recompute::none,
                                           backend::head_chunk_rows_of(DeviceKind::cpu, 1000), 1, false);
  REQUIRE(find(plan, "activations")->bytes == act.total());
  REQUIRE(find(plan, "unit buffers") == nullptr);   // LocalComm computes on the store's own buffers
  REQUIRE(find(plan, "weight copies") == nullptr);  // fp32 computes on the fp32 units
  REQUIRE(plan.items.size() == 2);
  REQUIRE(plan.peak_bytes() == 16 * in.model.num_parameters() + act.total());
  REQUIRE(plan.host_bytes() == 0);
  REQUIRE(plan.activation_bytes() == act.total());
  REQUIRE_THAT(plan.table(), Contains("optimizer state") && Contains("activations") && Contains("peak"));
  REQUIRE(plan.to_json().at("peak_bytes").get<std::int64_t>() == plan.peak_bytes());
}

TEST_CASE("memory plan: recomputation shrinks only the activations, as activation_bytes says", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 2048;
  std::int64_t previous = 0;
  for (const auto mode : {model::Recompute::full, model::Recompute::selective, model::Recompute::none}) {
    in.recompute = mode;
    const auto plan = train::plan_memory(in);
    REQUIRE(find(plan, "optimizer state")->bytes == 16 * in.model.num_parameters());
    REQUIRE(plan.activation_bytes() > previous);  // full < selective < none
    previous = plan.activation_bytes();
  }
}

TEST_CASE("memory plan: sharded ranks add the unit buffers and their comm's own buffers", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model(/*tied=*/true);
  in.tokens = 512;
  in.world = 3;
  in.chunk_bytes = 1 << 20;
  in.max_inflight = 8;
  const distributed::ShardLayout layout(model::build_unit_layouts(in.model), 3, 0);
  in.comm = distributed::CommKind::collective;
  auto plan = train::plan_memory(in);
  REQUIRE(find(plan, "optimizer state")->bytes == 16 * layout.owned_elements());
  REQUIRE(find(plan, "unit buffers")->bytes == 4 * distributed::UnitBufferPool::planned_floats(layout));
  REQUIRE(find(plan, "reduce-scatter receive buffers") != nullptr);
  REQUIRE(find(plan, "gradient slots") == nullptr);

  in.comm = distributed::CommKind::odc;
  in.transport = distributed::TransportKind::ipc;
  in.deterministic = true;
  plan = train::plan_memory(in);
  REQUIRE(find(plan, "per-client accumulators")->bytes == 3 * 4 * layout.owned_elements());
  REQUIRE(find(plan, "gradient slots") != nullptr);
  REQUIRE(find(plan, "peers' regions mapped here") != nullptr);  // host shared memory is resident here
  REQUIRE(find(plan, "reduce-scatter receive buffers") == nullptr);

  // bf16 compute on the CPU: rounded fp32 copies of the largest unit, two live with tied embeddings.
  in.compute = DType::bf16;
  plan = train::plan_memory(in);
  std::int64_t largest = 0;
  for (int u = 0; u < layout.num_units(); ++u) largest = std::max(largest, layout.unit(u).numel);
  REQUIRE(find(plan, "weight copies")->bytes == 2 * largest * 4);
}

TEST_CASE("memory plan: a GPU rank's state is on the device, its staging on the host", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 4096;
  in.device = DeviceKind::cuda;
  in.compute = DType::bf16;
  in.world = 2;
  in.max_inflight = 8;
  in.chunk_bytes = 1 << 20;
  const auto plan = train::plan_memory(in);
  REQUIRE(find(plan, "host staging of the state")->on_device == false);
  REQUIRE(find(plan, "weight copies")->bytes % 2 == 0);
  REQUIRE(find(plan, "cuBLASLt workspace")->pooled == false);
  REQUIRE(find(plan, "peers' regions mapped here") == nullptr);  // CUDA IPC maps, it does not copy
  const auto act = model::activation_bytes(in.model, DType::bf16, 4096, model::Recompute::none,
                                           backend::head_chunk_rows_of(DeviceKind::cuda, 1000), 1, true);
  REQUIRE(plan.activation_bytes() == act.total());
  REQUIRE(plan.peak_bytes() == plan.device_bytes());
  REQUIRE(plan.pooled_bytes() < plan.device_bytes());
  REQUIRE(plan.host_bytes() == 3 * 4 * distributed::ShardLayout(model::build_unit_layouts(in.model), 2, 0).owned_elements());
}

TEST_CASE("memory plan: cuDNN attention's workspace, up to model.cudnn_workspace_mib", "[train][memory]") {
  const auto inputs = [](std::vector<std::string> assignments) {
    assignments.insert(assignments.end(), {"model.device=cuda", "model.dtype=bfloat16"});
    return train::memory_inputs(settings_with(assignments), small_model(), 1, 4096, false);
  };
  // Counted where the run may take cuDNN: model.attention cudnn, or auto once auto takes it.
  CHECK(inputs({"model.attention=cudnn"}).cudnn_attention);
  CHECK_FALSE(inputs({"model.attention=native"}).cudnn_attention);
  CHECK(inputs({}).cudnn_attention == kernels::kAutoTakesCudnn);
  CHECK_FALSE(train::memory_inputs(settings_with({"model.attention=cudnn"}), small_model(), 1, 4096, false)
                  .cudnn_attention);  // model.device cpu
  CHECK(inputs({}).cudnn_workspace_limit == kernels::kCudnnWorkspaceLimitMiB << 20);
  CHECK(inputs({"model.cudnn_workspace_mib=512"}).cudnn_workspace_limit == std::int64_t{512} << 20);

  train::MemoryInputs in = inputs({"model.attention=cudnn", "model.cudnn_workspace_mib=512"});
  // 4096 tokens of 4/2 heads: the worst class (a 2049-token sequence beside 2047 one-token ones,
  // B 2048 x S 4096) is far over the bound: a call takes at most the bound.
  const auto bounded = train::plan_memory(in);
  const train::MemoryItem* item = find(bounded, "cuDNN attention workspace");
  REQUIRE(item != nullptr);
  CHECK(item->bytes == std::int64_t{512} << 20);
  CHECK((item->on_device && item->pooled));  // from the backend's allocator
  CHECK_THAT(item->rule, Contains("model.cudnn_workspace_mib") && Contains("an estimate"));
  // 64 tokens: the estimate is below the bound, and is the item.
  in.tokens = 64;
  const std::int64_t estimate = kernels::cudnn_backward_workspace_estimate(64, 4, 2, 32);
  REQUIRE(estimate < in.cudnn_workspace_limit);
  CHECK(find(train::plan_memory(in), "cuDNN attention workspace")->bytes == estimate);
  // The item is all the attention choice adds.
  train::MemoryInputs native = in;
  native.cudnn_attention = false;
  CHECK(find(train::plan_memory(native), "cuDNN attention workspace") == nullptr);
  CHECK(train::plan_memory(in).peak_bytes() - train::plan_memory(native).peak_bytes() == estimate);
  // Never on the CPU.
  in.device = DeviceKind::cpu;
  CHECK(find(train::plan_memory(in), "cuDNN attention workspace") == nullptr);
}

TEST_CASE("memory plan: the largest cap that fits is a multiple of the granule at the boundary", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 256;
  const std::int64_t at_256 = train::plan_memory(in).peak_bytes();
  REQUIRE(train::max_tokens_that_fit(in, at_256 - 1) == 0);
  REQUIRE(train::max_tokens_that_fit(in, at_256) == 256);
  in.tokens = 10000;
  const std::int64_t budget = train::plan_memory(in).peak_bytes();
  const std::int64_t cap = train::max_tokens_that_fit(in, budget);
  REQUIRE(cap % 256 == 0);
  in.tokens = cap;
  REQUIRE(train::plan_memory(in).peak_bytes() <= budget);
  in.tokens = cap + 256;
  REQUIRE(train::plan_memory(in).peak_bytes() > budget);
  REQUIRE(cap >= 9984);  // 10000 fits, so its multiple of 256 below does
  // auto under a budget that not even 256 tokens fit: refused with the plan at 256 tokens.
  const auto settings = settings_with({"data.max_tokens_per_microbatch=auto", "train.memory_budget_gib=0.001"});
  REQUIRE_THROWS_WITH(train::plan_run_memory(settings, small_model(), 1, 0, 1, false),
                      Contains("data.max_tokens_per_microbatch: auto: not even 256 tokens fit this rank's budget of 1.0 MiB") &&
                          Contains("the plan at 256 tokens:") && Contains("optimizer state"));
  const auto fitted = train::plan_run_memory(settings_with({"data.max_tokens_per_microbatch=auto",
                                                          "train.memory_budget_gib=1"}), small_model(), 1, 0, 1, false);
  REQUIRE(fitted.auto_token_cap % 256 == 0);
  REQUIRE(fitted.budget == 1073741824LL);
  REQUIRE(fitted.budget_origin == "train.memory_budget_gib");
}

TEST_CASE("memory plan: the budget and the refusal with the table and the fixes", "[train][memory]") {
  REQUIRE(train::memory_budget(settings_with({}), 1000) == 950);
  REQUIRE(train::memory_budget(settings_with({}), 0) == 0);
  REQUIRE(train::memory_budget(settings_with({"train.memory_budget_gib=2"}), 1000) == 2147483648LL);
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 1024;
  const auto plan = train::plan_memory(in);
  REQUIRE_NOTHROW(train::check_fits(plan, plan.peak_bytes(), "x"));
  REQUIRE_NOTHROW(train::check_fits(plan, 0, "unknown"));
  REQUIRE_THROWS_WITH(train::check_fits(plan, plan.peak_bytes() - 1, "train.memory_budget_gib"),
                      Contains("the memory plan needs") && Contains("(train.memory_budget_gib)") &&
                          Contains("train.recompute: full") && Contains("optimizer state"));
}

TEST_CASE("memory plan: data.max_tokens_per_microbatch takes a number or auto, nothing else", "[train][memory][config]") {
  const Config automatic = config_with({"data.max_tokens_per_microbatch=auto"});
  REQUIRE(automatic.get_int_word("data.max_tokens_per_microbatch") == std::optional<std::string>("auto"));
  REQUIRE_THROWS_WITH(automatic.get_int("data.max_tokens_per_microbatch"), Contains("set a number"));
  REQUIRE_THAT(automatic.canonical(), Contains("data.max_tokens_per_microbatch=auto"));
  REQUIRE(data::token_cap(automatic, 100, 4096) == 4096);
  REQUIRE_THROWS_WITH(data::token_cap(automatic, 100), Contains("auto is resolved by odc-train's memory plan"));
  const Config number = config_with({"data.max_tokens_per_microbatch=512"});
  REQUIRE_FALSE(number.get_int_word("data.max_tokens_per_microbatch").has_value());
  REQUIRE(data::token_cap(number, 100, 4096) == 512);
  REQUIRE_THROWS_WITH(config_with({"data.max_tokens_per_microbatch=lots"}),
                      Contains("expects an integer or auto, found 'lots'"));
  REQUIRE_THROWS_WITH(config_with({"data.max_tokens_per_microbatch=-3"}), Contains("must be >= 0"));
}

TEST_CASE("memory plan: one rank keeps every weight copy unless only dropping them fits", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 512;
  in.compute = DType::bf16;  // the CPU bf16 mode: fp32 rounded copies
  const auto kept = train::plan_memory(in);
  REQUIRE(find(kept, "weight copies")->bytes == in.model.num_parameters() * 4);
  in.keep_weight_copies = false;
  const auto lean = train::plan_memory(in);
  const distributed::ShardLayout layout(model::build_unit_layouts(in.model), 1, 0);
  std::int64_t largest = 0;
  for (int u = 0; u < layout.num_units(); ++u) largest = std::max(largest, layout.unit(u).numel);
  REQUIRE(find(lean, "weight copies")->bytes == largest * 4);
  // A budget between the two: the run keeps no copies (and says so in its plan); below both: refused.
  train::RunMemory run;
  run.inputs = in;
  run.inputs.keep_weight_copies = true;
  run.budget = (kept.peak_bytes() + lean.peak_bytes()) / 2;
  run.budget_origin = "test";
  const auto settled = train::settle_memory_plan(run, 512, false);
  CHECK_FALSE(settled.inputs.keep_weight_copies);
  CHECK(settled.peak_bytes() == lean.peak_bytes());
  run.budget = kept.peak_bytes();
  CHECK(train::settle_memory_plan(run, 512, false).inputs.keep_weight_copies);
  run.budget = lean.peak_bytes() - 1;
  CHECK_THROWS_WITH(train::settle_memory_plan(run, 512, false), Contains("the memory plan needs"));
}

TEST_CASE("memory plan: checkpoint.export_hf adds one gather of the streamed export, not the model", "[train][memory]") {
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 512;
  in.world = 2;
  REQUIRE(find(train::plan_memory(in), "HF export (checkpoint.export_hf)") == nullptr);
  REQUIRE(train::memory_inputs(settings_with({"checkpoint.export_hf=out"}), in.model, 2, 512, true).export_hf);
  REQUIRE_FALSE(train::memory_inputs(settings_with({}), in.model, 2, 512, true).export_hf);

  in.export_hf = true;
  const distributed::ShardLayout layout(model::build_unit_layouts(in.model), 2, 0);
  std::int64_t largest_shard = 0;
  for (int u = 0; u < layout.num_units(); ++u) largest_shard = std::max(largest_shard, layout.unit(u).shard);
  // This model's units are smaller than one gather: a piece is a whole shard. Over MPI the writer
  // receives the pieces in place; over shared memory the group holds its own copy too.
  const std::int64_t part = 4 * largest_shard;
  REQUIRE(train::export_piece_elements(largest_shard, 2, DType::f32) == largest_shard);
  const auto* item = find(train::plan_memory(in), "HF export (checkpoint.export_hf)");
  REQUIRE(item != nullptr);
  CHECK(item->bytes == 2 * part + part);
  CHECK_FALSE(item->on_device);  // host memory, also beside a GPU
  in.launched_with_mpi = false;
  CHECK(find(train::plan_memory(in), "HF export (checkpoint.export_hf)")->bytes == 2 * 2 * part + part);

  // A model whose units exceed a gather: bounded by the gather, whatever the model's size.
  in.model.vocab_size = 1'000'000;
  in.model.hidden_size = 1024;
  in.launched_with_mpi = true;
  const auto* big = find(train::plan_memory(in), "HF export (checkpoint.export_hf)");
  CHECK(big->bytes <= static_cast<std::int64_t>(train::kExportGatherBytes + train::kExportGatherBytes / 2));
  CHECK(big->bytes > static_cast<std::int64_t>(train::kExportGatherBytes));
}

TEST_CASE("memory plan: the comm is the factory's choice, with the buffers that comm reports", "[train][memory]") {
  // GPU ranks over MPI across two hosts: comm.transport auto takes UCX, staged through host memory
  // (choose_comm), not the IPC transport one host's ranks share.
  train::MemoryInputs in;
  in.model = small_model();
  in.tokens = 2048;
  in.device = DeviceKind::cuda;
  in.compute = DType::bf16;
  in.world = 8;
  in.chunk_bytes = 1 << 20;
  in.max_inflight = 8;
  in.launched_with_mpi = true;
  in.hosts = 2;
  distributed::CommOptions options;
  options.transport.chunk_bytes = in.chunk_bytes;
  options.transport.max_inflight = in.max_inflight;
  const auto choice = distributed::choose_comm(distributed::comm_facts(options, 8, "cuda", true, 2));
  REQUIRE(choice == distributed::CommChoice{distributed::CommBuild::odc_ucx, true});
  const auto plan = train::plan_memory(in);
  const distributed::ShardLayout layout(model::build_unit_layouts(in.model), 8, 0);
  const auto comm = distributed::planned_buffers(choice, options, distributed::comm_shape(layout), true, 1);
  for (const auto& item : comm.items) {
    INFO(item.name);
    REQUIRE(find(plan, item.name) != nullptr);
    CHECK(find(plan, item.name)->bytes == item.bytes);
    CHECK(find(plan, item.name)->on_device == item.on_device);
  }
  CHECK(find(plan, "gradient slots") == nullptr);  // the IPC transport's
  CHECK_FALSE(find(plan, "UCX gradient slots")->on_device);
  CHECK_FALSE(find(plan, "unit buffers")->on_device);  // the UCX comm's, on the host
  CHECK_FALSE(find(plan, "host copy of the state (staged)")->on_device);
  CHECK(find(plan, "host copy of the state (staged)")->bytes == 16 * layout.owned_elements());
  CHECK(find(plan, "staged gradient upload")->on_device);
  CHECK(find(plan, "staged unit buffers (estimate)")->on_device);
  // One host: CUDA IPC, its slots in device memory.
  in.hosts = 1;
  const auto one_host = train::plan_memory(in);
  CHECK(find(one_host, "gradient slots")->on_device);
  CHECK(find(one_host, "UCX gradient slots") == nullptr);
  CHECK(find(one_host, "staged gradient upload") == nullptr);
}

// NcclComm on one GPU (GPU only: the runner skips without a device). With one rank an all-gather
// hands back this rank's shard and a reduce-scatter its own gradient, so every result is exact:
// gathers equal the masters (bf16 gathers: the masters rounded to bf16), pushed gradients land in
// the accumulators bit for bit, and a model microbatch over NcclComm gives LocalComm's loss and
// gradients bit for bit. Two ranks on one GPU are refused before NCCL starts; a push that cannot
// complete is a timeout naming rank, operation and unit (checked in a child process: the aborted
// communicator's queued work must not touch this process's CUDA context).
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cuda_model_support.h"
#include "odc/backend/cpu_backend.h"
#include "odc/backend/cuda_backend.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/distributed/group/in_process_group.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/comm/nccl_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/kernels/cuda_device.h"
#include "odc/model/llama_model.h"

using namespace odc;
using distributed::GatherDtype;

using test::cuda::download;
using test::cuda::upload;

namespace {

// One rank: a device store on a CUDA backend and the NcclComm over it.
struct OneRank {
  explicit OneRank(GatherDtype dtype, double timeout_s = 60.0)
      : units(model::build_unit_layouts(config)),
        layout(units, 1, 0),
        store(layout, units, config, 3, {}, &gpu),
        group(distributed::InProcessGroup::create(1)),
        comm(store, *group[0], gpu, dtype, timeout_s) {}

  // Unit u's master shard as the store was initialized (host staging copy), rounded to bf16 when
  // the gathers travel in bf16.
  std::vector<float> expected_weights(int u, GatherDtype dtype) {
    const auto masters = store.host_masters();
    std::vector<float> out(masters.begin() + store.offset(u), masters.begin() + store.offset(u) + store.shard_size(u));
    if (dtype == GatherDtype::bf16) {
      for (float& v : out) v = bf16_to_f32(f32_to_bf16(v));
    }
    return out;
  }

  model::LlamaConfig config = test::cuda::gpu_tiny_model();
  std::vector<model::UnitLayout> units;
  distributed::ShardLayout layout;
  backend::CudaBackend gpu{0};
  distributed::ShardStore store;
  std::vector<std::unique_ptr<distributed::InProcessGroup>> group;
  distributed::NcclComm comm;
};

// A gradient whose sums over a few pushes are exact in fp32 (multiples of 1/8, small).
std::vector<float> known_gradient(int unit, std::int64_t n) {
  std::vector<float> g(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    g[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + unit) % 11 - 5) * 0.125f;
  }
  return g;
}

}  // namespace

TEST_CASE("NcclComm (one rank): every acquire returns the masters, fp32 and bf16 gathers", "[cuda][nccl]") {
  for (const GatherDtype dtype : {GatherDtype::f32, GatherDtype::bf16}) {
    INFO("gather dtype " << distributed::gather_dtype_name(dtype));
    OneRank r(dtype);
    CHECK(r.comm.name() == "collective");
    CHECK(r.comm.world_size() == 1);
    r.comm.begin_minibatch();
    for (int u = 0; u < r.layout.num_units(); ++u) {
      const float* w = r.comm.acquire(u);
      CHECK(download(r.gpu, w, r.layout.unit(u).padded) == r.expected_weights(u, dtype));
      r.comm.release(u);
    }
    r.comm.end_minibatch();

    // New masters (as after an optimizer step): the next minibatch gathers them, through the
    // prefetch of the next unit while the current one is held.
    for (float& v : r.store.host_masters()) v = v * 2.0f + 0.001f;
    r.store.push_to_device();
    r.comm.begin_minibatch();
    for (int u = 0; u < r.layout.num_units(); ++u) {
      const float* w = r.comm.acquire(u);
      r.comm.prefetch(u + 1);
      CHECK(download(r.gpu, w, r.layout.unit(u).padded) == r.expected_weights(u, dtype));
      r.comm.release(u);
    }
    r.comm.end_minibatch();
  }
}

TEST_CASE("NcclComm (one rank): pushed gradients land in the accumulators exactly", "[cuda][nccl]") {
  OneRank r(GatherDtype::f32);
  r.comm.begin_minibatch();
  // Two microbatches, backward order: 2 x units pushes through 3 gradient buffers, so buffers are
  // reused after their reduce-scatter (wait_push, then the slice added into the accumulator).
  for (int microbatch = 0; microbatch < 2; ++microbatch) {
    for (int u = r.layout.num_units() - 1; u >= 0; --u) {
      float* g = r.comm.grad_buffer(u);
      upload(r.gpu, known_gradient(u, r.layout.unit(u).padded), g);
      r.comm.push_grad(u);
    }
  }
  r.comm.end_minibatch();
  for (int u = 0; u < r.layout.num_units(); ++u) {
    std::vector<float> expected = known_gradient(u, r.store.shard_size(u));
    for (float& v : expected) v *= 2.0f;
    CHECK(download(r.gpu, r.store.grad(u), r.store.shard_size(u)) == expected);
  }
  // The next minibatch starts from zero.
  r.comm.begin_minibatch();
  const std::vector<float> zeros(static_cast<std::size_t>(r.store.shard_size(0)), 0.0f);
  CHECK(download(r.gpu, r.store.grad(0), r.store.shard_size(0)) == zeros);
  r.comm.end_minibatch();
}

TEST_CASE("NcclComm (one rank): a model microbatch gives LocalComm's loss and gradients bit for bit",
          "[cuda][nccl]") {
  const auto config = test::cuda::gpu_tiny_model();
  const auto batch = test::cuda::tiny_batch(config);
  for (const GatherDtype dtype : {GatherDtype::f32, GatherDtype::bf16}) {
    // The model computes with bf16 copies of the weights, so a bf16 gather changes nothing.
    INFO("gather dtype " << distributed::gather_dtype_name(dtype));
    model::LlamaModel local_model(config, std::make_unique<backend::CudaBackend>(0));
    model::LlamaModel nccl_model(config, std::make_unique<backend::CudaBackend>(0));
    const distributed::ShardLayout layout(local_model.units(), 1, 0);
    distributed::ShardStore local_store(layout, local_model.units(), config, 3, {}, &local_model.backend());
    distributed::ShardStore nccl_store(layout, nccl_model.units(), config, 3, {}, &nccl_model.backend());
    distributed::LocalComm local(local_store);
    auto group = distributed::InProcessGroup::create(1);
    distributed::NcclComm nccl(nccl_store, *group[0], nccl_model.backend(), dtype, 60.0);
    local.begin_minibatch();
    nccl.begin_minibatch();
    const auto expected = local_model.train_microbatch(batch, local, local);
    const auto got = nccl_model.train_microbatch(batch, nccl, nccl);
    local.end_minibatch();
    nccl.end_minibatch();
    std::printf("[cuda-nccl] %s gathers: loss %.9f (LocalComm %.9f)\n", distributed::gather_dtype_name(dtype).data(),
                got.weighted_loss, expected.weighted_loss);
    CHECK(got.weighted_loss == expected.weighted_loss);
    CHECK(got.target_tokens == expected.target_tokens);
    const std::int64_t n = layout.owned_elements();
    const auto local_grads = download(local_model.backend(), local_store.grad(0), n);
    CHECK(download(nccl_model.backend(), nccl_store.grad(0), n) == local_grads);
  }
}

TEST_CASE("NcclComm: two ranks on one GPU are refused before NCCL starts, naming comm odc", "[cuda][nccl]") {
  auto group = distributed::InProcessGroup::create(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        backend::CudaBackend gpu(0);
        const auto config = test::cuda::gpu_tiny_model();
        const auto units = model::build_unit_layouts(config);
        const distributed::ShardLayout layout(units, 2, r);
        distributed::ShardStore store(layout, units, config, 3, {}, &gpu);
        distributed::NcclComm comm(store, *group[static_cast<std::size_t>(r)], gpu, GatherDtype::f32, 30.0);
        errors[static_cast<std::size_t>(r)] = "no error";
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("ranks 0, 1 share GPU GPU-") && Catch::Contains("NCCL refuses duplicate devices") &&
                      Catch::Contains("train.comm=odc"));
  }
}

TEST_CASE("NcclComm: a backend or store off the GPU is an error naming it", "[cuda][nccl]") {
  const auto config = test::cuda::gpu_tiny_model();
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, 1, 0);
  distributed::ShardStore host_store(layout, units, config, 3);
  auto group = distributed::InProcessGroup::create(1);
  backend::CpuBackend cpu(1);
  CHECK_THROWS_WITH(distributed::NcclComm(host_store, *group[0], cpu, GatherDtype::f32, 1.0),
                    Catch::Contains("rank 0: the NCCL collective comm runs on a CUDA backend, but was given the cpu "
                                    "backend"));
  backend::CudaBackend gpu(0);
  CHECK_THROWS_WITH(distributed::NcclComm(host_store, *group[0], gpu, GatherDtype::f32, 1.0),
                    Catch::Contains("this store lives in host memory"));
}

namespace {

// A host function on the compute stream that holds it until `release` is set: the comm stream,
// which follows the compute stream, cannot run the reduce-scatter queued behind it.
void CUDART_CB hold_stream(void* release) {
  while (!static_cast<std::atomic<bool>*>(release)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

// Run in a child process by the next test case (hidden: not part of a plain run).
TEST_CASE("NcclComm timeout (child process)", "[.][nccl-timeout-child]") {
  std::atomic<bool> release{false};
  // A deadline that NCCL's start-up stays well inside. The stream is released once the error is
  // caught, or at the latest at twice the deadline should the abort wait for the device meanwhile.
  constexpr double kTimeout = 3.0;
  std::jthread releaser([&] {  // joined on every way out of this scope
    const auto latest = std::chrono::steady_clock::now() + std::chrono::duration<double>(2 * kTimeout);
    while (!release && std::chrono::steady_clock::now() < latest) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    release = true;
  });
  {
    OneRank r(GatherDtype::f32, kTimeout);
    r.comm.begin_minibatch();
    kernels::cuda::check_cuda(cudaLaunchHostFunc(static_cast<cudaStream_t>(r.gpu.native_stream()), hold_stream, &release),
                              "cudaLaunchHostFunc");
    r.comm.grad_buffer(0);
    r.comm.push_grad(0);
    try {
      r.comm.end_minibatch();  // waits for the push
      std::printf("nccl-timeout-child: no error\n");
    } catch (const Error& e) {
      std::printf("nccl-timeout-child: %s\n", e.what());
    }
    std::fflush(stdout);
    release = true;
    releaser.join();
    try {
      kernels::cuda::device_synchronize();  // nothing of the aborted push is left when the buffers go
    } catch (const Error& e) {
      std::printf("nccl-timeout-child: after the abort: %s\n", e.what());  // an error path: reported, not failed
    }
  }
}

TEST_CASE("NcclComm: a push that cannot complete times out naming rank, operation and unit, and aborts",
          "[cuda][nccl][timeout]") {
  // This test binary itself (the shell popen starts would be /proc/self/exe), bounded: a hang is a
  // failure (exit 124), not a stuck test run.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "timeout 60 '" + self + "' '[nccl-timeout-child]' 2>&1";
  std::FILE* child = ::popen(command.c_str(), "r");
  REQUIRE(child != nullptr);
  std::string output;
  char chunk[4096];
  while (std::fgets(chunk, sizeof chunk, child) != nullptr) output += chunk;
  const int status = ::pclose(child);
  INFO(output);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK_THAT(output, Catch::Contains("nccl-timeout-child: rank 0: NCCL reduce-scatter of unit 0 (embedding): not "
                                     "complete after comm.timeout_s = 3 s"));
}

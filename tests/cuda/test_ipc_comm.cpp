// OdcComm over the IPC transport on the GPU (GPU only: the runner skips without a device): 2 and 3 ranks as threads of
// this process, each with its own CudaBackend on GPU 0 and its state in device memory (peers of one
// process share pointers; across processes the same code opens CUDA IPC handles, which the GPU
// check's ipc-train step runs). Gathers must equal the masters (bf16 gathers: the masters rounded
// to bf16) and pushed gradients, chunked through few data slots, must sum exactly on the owners
// (small multiples of 1/8: any order is exact); deterministic accumulation must give the same bits
// twice.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cuda_model_support.h"
#include "odc/backend/cuda_backend.h"
#include "odc/core/dtype.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/model/units.h"
#include "unit/rank_threads.h"

using namespace odc;
using distributed::GatherDtype;

using test::cuda::download;
using test::cuda::upload;

namespace {

float grad_value(int rank, int unit, int k, std::int64_t i) {
  return static_cast<float>(((i * 7 + unit + 3 * rank + k) % 11) - 5) * 0.125f;
}

int pushes_of(int rank, int unit) { return 1 + (rank + unit) % 3; }

// Runs one minibatch on `world` ranks; every rank's accumulators (host copies) in rank order.
std::vector<std::vector<float>> run_minibatch(int world, GatherDtype dtype, bool deterministic,
                                              std::vector<std::string>& problems) {
  const auto config = test::cuda::gpu_tiny_model();
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout whole(units, 1, 0);
  const distributed::ShardStore reference(whole, units, config, 3);
  std::vector<std::vector<float>> grads(static_cast<std::size_t>(world));
  problems.assign(static_cast<std::size_t>(world), "");
  const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
    const int r = group.rank();
    std::string& report = problems[static_cast<std::size_t>(r)];
    backend::CudaBackend gpu(0);
    const distributed::ShardLayout layout(units, world, r);
    distributed::CommOptions options;
    options.kind = distributed::CommKind::odc;
    options.odc_transport = distributed::TransportKind::ipc;
    options.gather_dtype = dtype;
    options.deterministic = deterministic;
    options.transport.chunk_bytes = 4096;  // several chunks per slice
    options.transport.max_inflight = 2;    // slots reused within a minibatch
    auto stack = distributed::make_comm(options, group, layout, units, config, 3, &gpu);
    auto& comm = stack->comm();
    comm.begin_minibatch();
    for (int u = 0; u < layout.num_units(); ++u) {
      comm.prefetch((u + 1) % layout.num_units());
      const std::int64_t n = layout.unit(u).numel;
      const auto got = download(gpu, comm.acquire(u), n);
      for (std::int64_t i = 0; i < n; ++i) {
        float want = reference.master(u)[i];
        if (dtype == GatherDtype::bf16) want = bf16_to_f32(f32_to_bf16(want));
        if (got[static_cast<std::size_t>(i)] != want) {
          report += "unit " + std::to_string(u) + " gathered wrong at " + std::to_string(i) + "; ";
          break;
        }
      }
      comm.release(u);
      for (int k = 0; k < pushes_of(r, u); ++k) {
        std::vector<float> g(static_cast<std::size_t>(layout.unit(u).padded));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = grad_value(r, u, k, static_cast<std::int64_t>(i));
        upload(gpu, g, comm.grad_buffer(u));
        comm.push_grad(u);
      }
    }
    comm.end_minibatch();
    auto& store = stack->store();
    grads[static_cast<std::size_t>(r)] = download(gpu, store.grad(0), layout.owned_elements());
    for (int u = 0; u < layout.num_units(); ++u) {
      for (std::int64_t j = 0; j < layout.unit(u).shard; ++j) {
        const std::int64_t i = layout.shard_begin(u, r) + j;
        float want = 0.0f;
        for (int c = 0; c < world; ++c) {
          for (int k = 0; k < pushes_of(c, u); ++k) want += grad_value(c, u, k, i);
        }
        if (grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(store.offset(u) + j)] != want) {
          report += "unit " + std::to_string(u) + " accumulated wrong at " + std::to_string(j) + "; ";
          break;
        }
      }
    }
  });
  for (int r = 0; r < world; ++r) {
    if (!errors[static_cast<std::size_t>(r)].empty()) problems[static_cast<std::size_t>(r)] += errors[static_cast<std::size_t>(r)];
  }
  return grads;
}

}  // namespace

TEST_CASE("ODC over CUDA IPC on the GPU: gathers equal the masters, pushes sum exactly on the owners", "[cuda][ipc]") {
  for (const int world : {2, 3}) {
    for (const GatherDtype dtype : {GatherDtype::f32, GatherDtype::bf16}) {
      INFO(world << " ranks, " << distributed::gather_dtype_name(dtype) << " gathers");
      std::vector<std::string> problems;
      run_minibatch(world, dtype, false, problems);
      for (const auto& p : problems) CHECK(p == "");
    }
  }
}

TEST_CASE("ODC over CUDA IPC on the GPU, deterministic: the same bits twice", "[cuda][ipc]") {
  std::vector<std::string> problems;
  const auto a = run_minibatch(3, GatherDtype::f32, true, problems);
  for (const auto& p : problems) CHECK(p == "");
  const auto b = run_minibatch(3, GatherDtype::f32, true, problems);
  for (const auto& p : problems) CHECK(p == "");
  CHECK(a == b);
}

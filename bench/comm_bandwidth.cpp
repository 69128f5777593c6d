// The comms' data movement on one host, side by side in one run: for each comm, the bandwidth of
// a unit's gather (every owner's shard into this rank's unit buffer: acquire + release) and of
// its scatter-accumulate (push_grad of the full gradient, every owner adding its slice, through
// end_minibatch), against a local copy of the same bytes in the same memory (the ceiling).
//
//   mpirun -np N comm_bandwidth [--device cpu|cuda] [--unit-mib M] [--units U] [--reps R]
//                               [--comms ipc,ipc-bf16,ucx,collective]
//   odc-run --local N comm_bandwidth ...      (no MPI: the ranks meet in shared memory)
//
// Comms: ipc (ODC over shared memory, or CUDA IPC for --device cuda), ipc-bf16 (the same with bf16
// gathers), ucx (ODC over UCX, host only), collective (MPI collectives on the host, NCCL on GPUs),
// staged (--device cuda: ODC over UCX through host staging, the inter-node path). One JSON line per
// comm from rank 0; a comm that cannot run here prints {"comm": ..., "error": ...} and the others go
// on. Times are the slowest rank's. Exit 0, 1 on a failure, 2 on a bad command line, 77 when
// --device cuda finds no GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/distributed/comm/comm_factory.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/group/shm_host_group.h"
#include "odc/model/units.h"

namespace {

using namespace odc;

struct Options {
  std::string device = "cpu";
  std::int64_t unit_mib = 64;
  int units = 4;
  int reps = 5;
  std::vector<std::string> comms;
};

constexpr const char* kUsage =
    "usage: comm_bandwidth [--device cpu|cuda] [--unit-mib M] [--units U] [--reps R] [--comms LIST]\n";

Options parse(int argc, char** argv) {
  const cli::Command command{"comm_bandwidth", kUsage,
                             {{"--device"}, {"--unit-mib"}, {"--units"}, {"--reps"}, {"--comms"}}};
  const auto args = cli::parse(command, argc, argv);
  Options o;
  o.device = args.choice("--device", {"cpu", "cuda"}, o.device);
  o.unit_mib = args.integer("--unit-mib", o.unit_mib, Range::at_least(1).and_at_most(1 << 20));
  o.units = static_cast<int>(args.integer("--units", o.units, Range::at_least(1).and_at_most(1 << 16)));
  o.reps = static_cast<int>(args.integer("--reps", o.reps, Range::at_least(1).and_at_most(1 << 20)));
  o.comms = args.list("--comms", {});
  if (o.comms.empty()) {
    o.comms = o.device == "cuda" ? std::vector<std::string>{"ipc", "ipc-bf16", "collective", "staged"}
                                 : std::vector<std::string>{"ipc", "ipc-bf16", "ucx", "collective"};
  }
  return o;
}

// A decoder layer of about `mib` MiB of fp32 parameters (intermediate = 4 x hidden: 16 h^2).
model::LlamaConfig shape_for(std::int64_t mib, int layers) {
  std::int64_t hidden = 64;
  while (16 * (hidden + 64) * (hidden + 64) * 4 <= mib << 20) hidden += 64;
  model::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = static_cast<int>(hidden);
  c.intermediate_size = static_cast<int>(4 * hidden);
  c.num_hidden_layers = layers;
  c.num_attention_heads = static_cast<int>(hidden / 64);
  c.num_key_value_heads = c.num_attention_heads;
  c.head_dim = 64;
  c.max_position_embeddings = 128;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The slowest rank's value (each rank's in its own slot of a sum: every rank gets every value).
double slowest(distributed::HostGroup& group, double mine) {
  std::vector<double> all(static_cast<std::size_t>(group.size()), 0.0);
  all[static_cast<std::size_t>(group.rank())] = mine;
  group.all_reduce_sum(all, "the benchmark's times");
  return *std::max_element(all.begin(), all.end());
}

nlohmann::json measure(distributed::HostGroup& group, backend::Backend& device, const Options& o, const std::string& name) {
  const auto config = shape_for(o.unit_mib, o.units);
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, group.size(), group.rank());
  distributed::CommOptions options;
  options.kind = name == "collective" ? distributed::CommKind::collective : distributed::CommKind::odc;
  options.odc_transport = name == "ucx" || name == "staged" ? distributed::TransportKind::ucx
                          : name.rfind("ipc", 0) == 0   ? distributed::TransportKind::ipc
                                                        : distributed::TransportKind::automatic;
  options.gather_dtype = name == "ipc-bf16" ? distributed::GatherDtype::bf16 : distributed::GatherDtype::f32;
  options.transport.chunk_bytes = 4 << 20;
  auto stack = distributed::make_comm(options, group, layout, units, config, 1, &device);
  auto& comm = stack->comm();
  const int first = 1, last = layout.num_units() - 2;  // the decoder layers: equal, unit-sized
  const std::int64_t floats = layout.unit(first).padded;

  comm.begin_minibatch();
  for (int u = first; u <= last; ++u) {  // warm-up (first touches, lazy mappings)
    comm.acquire(u);
    comm.release(u);
  }
  device.synchronize();
  group.barrier("gather start");
  auto t = std::chrono::steady_clock::now();
  for (int r = 0; r < o.reps; ++r) {
    for (int u = first; u <= last; ++u) {
      comm.prefetch(u + 1 <= last ? u + 1 : first);
      comm.acquire(u);
      comm.release(u);
    }
  }
  device.synchronize();
  const double gather_s = slowest(group, seconds_since(t));
  comm.end_minibatch();

  comm.begin_minibatch();
  group.barrier("push start");
  t = std::chrono::steady_clock::now();
  for (int r = 0; r < o.reps; ++r) {
    for (int u = first; u <= last; ++u) {
      comm.grad_buffer(u);
      comm.push_grad(u);
    }
  }
  comm.end_minibatch();
  device.synchronize();
  const double push_s = slowest(group, seconds_since(t));

  // The ceiling: one copy of a unit in the same memory, as often.
  backend::Buffer a(device.memory(), DType::f32), b(device.memory(), DType::f32);
  const backend::View va = a.get(floats), vb = b.get(floats);
  device.copy(va, vb);
  device.synchronize();
  t = std::chrono::steady_clock::now();
  for (int r = 0; r < o.reps; ++r) {
    for (int u = first; u <= last; ++u) device.copy(va, vb);
  }
  device.synchronize();
  const double copy_s = slowest(group, seconds_since(t));

  const double moved = static_cast<double>(floats) * sizeof(float) * o.reps * (last - first + 1);
  const auto resources = comm.resources();
  return {{"bench", "comm_bandwidth"},        {"device", o.device},
          {"world", group.size()},             {"comm", name},
          {"transport", std::string(comm.name())},
          {"unit_mib", static_cast<double>(floats) * 4 / (1 << 20)},
          {"units", last - first + 1},         {"reps", o.reps},
          {"gather_GBps", moved / gather_s / 1e9}, {"push_GBps", moved / push_s / 1e9},
          {"copy_GBps", moved / copy_s / 1e9}, {"gather_vs_copy", copy_s / gather_s},
          {"push_vs_copy", copy_s / push_s},   {"registered_mib", static_cast<double>(resources.registered_bytes) / (1 << 20)}};
}

int run(distributed::HostGroup& group, int local_rank, const Options& o) {
  if (o.device == "cuda" && !backend::cuda_backend_built()) {
    if (group.is_root()) std::fputs("comm_bandwidth: this build has no CUDA backend\n", stderr);
    return 77;
  }
  std::unique_ptr<backend::Backend> device;
  try {
    device = backend::make_backend(o.device, o.device == "cuda" ? DType::bf16 : DType::f32, 1, local_rank);
  } catch (const Error& e) {
    if (o.device == "cuda") {
      if (group.is_root()) std::fprintf(stderr, "comm_bandwidth: skipped: %s\n", e.what());
      return 77;
    }
    throw;
  }
  for (const auto& name : o.comms) {
    nlohmann::json line;
    try {
      line = measure(group, *device, o, name);
    } catch (const Error& e) {
      line = {{"bench", "comm_bandwidth"}, {"device", o.device}, {"world", group.size()}, {"comm", name}, {"error", e.what()}};
    }
    if (group.is_root()) std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_mpi_tool("comm_bandwidth", argc, argv, [&](const odc::distributed::MpiSession& mpi) {
    const Options options = parse(argc, argv);
    if (!mpi.initialized()) {
      if (!odc::distributed::launched_locally()) {
        fail("comm_bandwidth compares comms between ranks: start it with mpirun or odc-run");
      }
      // odc-run --local N: the ranks of one host, so the local rank is the rank.
      auto group = odc::distributed::make_local_group_from_env(600.0);
      return run(*group, group->rank(), options);
    }
    auto group = odc::distributed::make_world_group(600.0);
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    return run(*group, local != nullptr ? std::atoi(local) : group->rank(), options);
  }, /*mpi_optional=*/true);
}

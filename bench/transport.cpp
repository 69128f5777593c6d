// odc-bench: transport microbenchmark (built as bin/odc-bench from bench/, beside the other
// benchmarks; a command as the tools are). Under `mpirun -np N`, for each unit size S it measures,
// in the same run and on the same bytes,
//   gather:             ODC (UcxTransport::get of every owner's shard, as OdcComm::start_gather, by
//                       --gather-protocol: get, request or auto) vs MPI_Allgather of S/N bytes per rank;
//   scatter_accumulate: ODC (UcxTransport::push of each owner's slice, accumulated by the owner's
//                       progress thread; completion = the PushLedger's count exchange and wait, as
//                       OdcComm::end_minibatch) vs MPI_Reduce_scatter_block + add into the
//                       accumulator (the collective baseline).
// The transport is configured as the trainer configures it (direct loads where UCX maps peers'
// regions, one slot per push of the largest shard); flags select the other paths.
// Rank 0 prints one JSON line per (op, size). Exit codes: 0 ok, 1 error, 2 usage error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/core/error.h"
#include "odc/core/tensor.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/group/mpi_session.h"
#include "odc/distributed/comm/push_ledger.h"
#include "odc/distributed/group/startup_deadline.h"
#include "odc/distributed/transport/transport_keys.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"
#include "support/median.h"

namespace {

constexpr const char* kUsage = R"(usage: mpirun -np N odc-bench [options]

Transport microbenchmark: ODC gather (one-sided UCX gets) vs MPI_Allgather, and ODC
scatter-accumulate (UCX pushes accumulated by the owner's progress thread) vs
MPI_Reduce_scatter_block + accumulate, on units of S bytes sharded over N ranks. Rank 0 prints one
JSON line per (op, size). Bandwidth = S*(N-1)/N bytes per rank / median iteration time (the slowest
rank's time of each iteration). ODC and MPI iterations alternate, so both see the same load.

options:
  --sizes-mib LIST     unit sizes in MiB, comma-separated (default 1,16,64,256)
  --ops LIST           gather,scatter_accumulate (default both)
  --iters N            timed iterations per cell; 0 = adapt so that each side runs >= --min-time-s
                       and >= 3 iterations (default 0)
  --min-time-s T       time per side and cell when adapting (default 0.5)
  --max-iters N        cap for adapted iterations (default 2000)
  --warmup N           untimed iterations per side after the verification run (default 1)
  --chunk-bytes B      transport chunk size to a peer whose region is mapped here (shared
                       memory): one get or push message, as comm.chunk_bytes (its default)
  --network-chunk-bytes B  the same to a peer reached over the network (request answers, push
                       messages), as comm.network_chunk_bytes (its default)
  --max-inflight N     transport operations in flight (default 8)
  --direct-load B      true: gathers copy straight from peers' regions where UCX maps them, as
                       comm.direct_load (default true); false: ucp_get via the progress thread
  --gather-protocol P  get: one-sided gets (copies where the owner's region is mapped); request:
                       the owner's progress thread answers a request per chunk; auto: get where
                       the owner's region is mapped, request otherwise, as comm.gather_protocol
                       (default auto); a comma-separated list runs each in turn, e.g. get,request
  --push-protocol P    slot: pushes go through per-client slots in the owner's region where it
                       is mapped, as the trainer sets it up (default); message: active-message
                       payload in --chunk-bytes chunks
  --slots-per-client N slots per (owner, client) for the slot protocol (default 2)
  --timeout-s T        transport stall timeout (default 120)
  -h, --help           show this help

UCX settings come from the environment (UCX_TLS, UCX_RNDV_THRESH, ...); pass them with mpirun -x.

output (one JSON line per op and size): odc_gbps / mpi_gbps, odc_ms / mpi_ms (medians), ratio
(odc_gbps / mpi_gbps), progress_cpu_s (rank 0's progress-thread CPU during the timed ODC
iterations), progress_cpu_frac (that / their wall time), progress_cpu_idle_s (its CPU during the
MPI iterations), iters, ucx_tls, mpi_btl (OMPI_MCA_btl), the transport options, and for
scatter_accumulate push_messages (messages one ODC iteration sends from rank 0: one per owner with
slots; where the owner's region is not mapped, e.g. over TCP, pushes fall back to
--network-chunk-bytes messages and direct loads to ucp_get), and for gather gather_protocol (as asked) and
gather_protocols (what rank 0 used for each owner, auto resolved).
)";

struct Options {
  std::vector<std::int64_t> sizes_mib{1, 16, 64, 256};
  bool gather = true;
  bool scatter = true;
  int iters = 0;
  double min_time_s = 0.5;
  int max_iters = 2000;
  int warmup = 1;
  std::int64_t chunk_bytes = odc::keys::comm_chunk_bytes.default_value();
  std::int64_t network_chunk_bytes = odc::keys::comm_network_chunk_bytes.default_value();
  int max_inflight = 8;
  bool direct_load = true;
  std::vector<odc::distributed::GatherProtocol> gather_protocols{odc::distributed::GatherProtocol::automatic};
  bool slot_pushes = true;
  int slots_per_client = 2;
  double timeout_s = 120.0;
};

odc::cli::Command command() {
  return {"odc-bench", kUsage,
          {{"--sizes-mib"}, {"--ops"}, {"--iters"}, {"--min-time-s"}, {"--max-iters"}, {"--warmup"}, {"--chunk-bytes"}, {"--network-chunk-bytes"},
           {"--max-inflight"}, {"--direct-load"}, {"--gather-protocol"}, {"--push-protocol"}, {"--slots-per-client"}, {"--timeout-s"}}};
}

Options parse_options(const odc::cli::Arguments& args) {
  using odc::Range;
  Options options;
  // 8 GiB per unit is far beyond any layer and keeps MPI's int counts in range.
  options.sizes_mib = args.integer_list("--sizes-mib", options.sizes_mib, Range::at_least(1).and_at_most(8192));
  if (const auto ops = args.list("--ops", {}); !ops.empty()) {
    options.gather = options.scatter = false;
    for (const auto& op : ops) {
      if (op == "gather") {
        options.gather = true;
      } else if (op == "scatter_accumulate") {
        options.scatter = true;
      } else {
        throw args.usage_error("--ops expects gather and/or scatter_accumulate, got '" + op + "'");
      }
    }
  }
  const auto int_option = [&](std::string_view name, int fallback, int minimum) {
    return args.integer(name, fallback, Range::at_least(minimum));  // an int: beyond INT_MAX is a usage error
  };
  options.iters = int_option("--iters", options.iters, 0);
  options.min_time_s = args.number("--min-time-s", options.min_time_s, Range::at_least(0));
  options.max_iters = int_option("--max-iters", options.max_iters, 1);
  options.warmup = int_option("--warmup", options.warmup, 0);
  options.chunk_bytes = args.integer("--chunk-bytes", options.chunk_bytes, odc::keys::comm_chunk_bytes.range());
  options.network_chunk_bytes =
      args.integer("--network-chunk-bytes", options.network_chunk_bytes, odc::keys::comm_network_chunk_bytes.range());
  options.max_inflight = int_option("--max-inflight", options.max_inflight, 1);
  options.direct_load = args.choice("--direct-load", {"true", "false"}, "true") == "true";
  if (const auto protocols = args.list("--gather-protocol", {}); !protocols.empty()) {
    options.gather_protocols.clear();
    for (const auto& name : protocols) {
      if (name != "auto" && name != "get" && name != "request") {
        throw args.usage_error("--gather-protocol expects get, request or auto, got '" + name + "'");
      }
      options.gather_protocols.push_back(odc::distributed::parse_gather_protocol(name));
    }
  }
  options.slot_pushes = args.choice("--push-protocol", {"slot", "message"}, "slot") == "slot";
  options.slots_per_client = int_option("--slots-per-client", options.slots_per_client, 1);
  options.timeout_s = args.number("--timeout-s", options.timeout_s, Range::at_least(1e-3));
  // Options the others make meaningless would be ignored.
  if (options.iters > 0 && (args.value("--min-time-s") || args.value("--max-iters"))) {
    throw args.usage_error("--min-time-s and --max-iters adapt the iteration count, which --iters N > 0 fixes: "
                           "give one or the other");
  }
  if (!options.gather && args.value("--gather-protocol")) {
    throw args.usage_error("--gather-protocol applies to the gather op, which --ops leaves out");
  }
  if (!options.scatter && (args.value("--push-protocol") || args.value("--slots-per-client"))) {
    throw args.usage_error("--push-protocol and --slots-per-client apply to the scatter_accumulate op, which --ops "
                           "leaves out");
  }
  return options;
}

double now_s() { return MPI_Wtime(); }

// Exact small integers, distinct per owner and per element, so any misplaced or missing chunk
// shows, and sums of up to 256 ranks stay exact in fp32.
float shard_value(int owner, std::int64_t i) { return static_cast<float>((owner * 7919 + i) % 65521); }
float grad_value(std::int64_t j) { return static_cast<float>(j % 65521); }

using odc::bench::median;

// One unit size: S bytes padded to N equal shards of `shard` floats (ShardLayout's rule).
struct Cell {
  std::int64_t size_mib = 0;
  std::int64_t shard = 0;   // floats per owner
  std::int64_t padded = 0;  // shard * N
};

class Bench {
 public:
  Bench(const Options& options, int rank, int world)
      : options_(options),
        rank_(rank),
        world_(world),
        comm_(MPI_COMM_WORLD),
        group_(odc::distributed::make_world_group(options.timeout_s)),
        ledger_(*group_) {
    std::int64_t largest = 0;
    for (const auto mib : options_.sizes_mib) largest = std::max(largest, make_cell(mib).shard);
    odc::distributed::TransportOptions transport_options;
    transport_options.chunk_bytes = options_.chunk_bytes;
    transport_options.network_chunk_bytes = options_.network_chunk_bytes;
    transport_options.max_inflight = options_.max_inflight;
    transport_options.timeout_s = options_.timeout_s;
    transport_options.direct_load = options_.direct_load;
    // As the trainer: a slot holds the largest shard, so every push of a shard is one slot.
    transport_options.slot_floats = options_.slot_pushes ? largest : 0;
    transport_options.slots_per_client = options_.slots_per_client;
    transport_ = std::make_unique<odc::distributed::UcxTransport>(*group_, largest, transport_options);
    // odc::Tensor, as OdcComm's and CollectiveComm's buffers and ShardStore's accumulator: 64-byte
    // aligned. Alignment matters here: a 16-byte offset between source and destination (what
    // std::vector gives) makes the kernel's CMA copies behind MPI 2-3x slower on this machine.
    full_ = odc::Tensor(odc::Shape{largest * world_}, odc::DType::f32);
    grad_ = odc::Tensor(odc::Shape{largest * world_}, odc::DType::f32);
    accumulator_ = odc::Tensor(odc::Shape{largest}, odc::DType::f32);
    reduced_ = odc::Tensor(odc::Shape{largest}, odc::DType::f32);
    // The accumulation OdcComm::accumulate does, with the same validation before writing.
    odc::distributed::OdcTransport::Handlers handlers;
    handlers.receive = [this](const odc::distributed::PushHeader& header, const float* data) {
      if (header.offset < 0 || header.count < 0 ||
          header.offset + header.count > accumulator_.numel()) {
        odc::fail("rank {}: invalid push from rank {} (offset {}, count {})", rank_, header.from, header.offset,
                  header.count);
      }
      float* acc = accumulator_.data<float>() + header.offset;
      for (std::int64_t i = 0; i < header.count; ++i) acc[i] += data[i];
    };
    handlers.applied = [this](int client, std::int64_t chunks) { ledger_.applied(client, chunks); };
    transport_->set_handlers(std::move(handlers));
    chunks_.assign(static_cast<std::size_t>(world_), 0);
    const char* tls = std::getenv("UCX_TLS");
    ucx_tls_ = tls != nullptr && *tls != '\0' ? tls : "default";
    // The MPI side's transports (Open MPI reads OMPI_MCA_btl), so a TCP run says both sides used TCP.
    const char* btl = std::getenv("OMPI_MCA_btl");
    mpi_btl_ = btl != nullptr && *btl != '\0' ? btl : "default";
  }

  void run() {
    for (const auto mib : options_.sizes_mib) {
      const Cell cell = make_cell(mib);
      if (options_.gather) run_gather(cell);
      if (options_.scatter) run_scatter(cell);
    }
  }

 private:
  Cell make_cell(std::int64_t mib) const {
    Cell cell;
    cell.size_mib = mib;
    const std::int64_t floats = (mib << 20) / static_cast<std::int64_t>(sizeof(float));
    cell.shard = (floats + world_ - 1) / world_;
    cell.padded = cell.shard * world_;
    return cell;
  }

  // ---- gather ----
  void odc_gather(const Cell& cell) {
    // Start with the next owner and wrap, as OdcComm::start_gather does.
    for (int i = 0; i < world_; ++i) {
      const int owner = (rank_ + 1 + i) % world_;
      transport_->get(owner, 0, full_.data<float>() + cell.shard * owner, cell.shard, gather_done_);
    }
    transport_->wait(gather_done_, "benchmark gather");
  }

  void mpi_gather(const Cell& cell) {
    MPI_Allgather(transport_->exposed().data(), static_cast<int>(cell.shard), MPI_FLOAT, full_.data<float>(),
                  static_cast<int>(cell.shard), MPI_FLOAT, comm_);
  }

  void check_gather(const Cell& cell, const char* who) const {
    for (int owner = 0; owner < world_; ++owner) {
      const float* got = full_.data<float>() + cell.shard * owner;
      for (std::int64_t i = 0; i < cell.shard; ++i) {
        if (got[i] != shard_value(owner, i)) {
          odc::fail("rank {}: {} gather of {} MiB is wrong: element {} of owner {}'s shard is {}, expected {}", rank_,
                    who, cell.size_mib, i, owner, got[i], shard_value(owner, i));
        }
      }
    }
  }

  void run_gather(const Cell& cell) {
    for (const auto protocol : options_.gather_protocols) {
      transport_->set_gather_protocol(protocol);
      run_gather(cell, protocol);
    }
  }

  void run_gather(const Cell& cell, odc::distributed::GatherProtocol protocol) {
    gather_protocol_ = std::string(odc::distributed::gather_protocol_name(protocol));
    float* shard = transport_->exposed().data();
    for (std::int64_t i = 0; i < cell.shard; ++i) shard[i] = shard_value(rank_, i);
    MPI_Barrier(comm_);  // every owner's shard is written before anybody reads it
    // Verification (also the first warm-up): a sentinel first, so stale data cannot pass.
    std::fill_n(full_.data<float>(), full_.numel(), -1.0f);
    odc_gather(cell);
    check_gather(cell, "ODC");
    std::fill_n(full_.data<float>(), full_.numel(), -1.0f);
    mpi_gather(cell);
    check_gather(cell, "MPI_Allgather");
    measure("gather", cell, [&] { odc_gather(cell); }, [&] { mpi_gather(cell); }, [] {});
  }

  // ---- scatter-accumulate ----
  void odc_scatter(const Cell& cell) {
    // As OdcComm::start_push: every owner's piece (the slot protocol where the owner's region is
    // mapped here and slots are configured, message pushes otherwise), from one gradient buffer.
    pieces_.clear();
    for (int i = 0; i < world_; ++i) {
      const int owner = (rank_ + 1 + i) % world_;
      pieces_.push_back({owner, 0, cell.shard * owner, cell.shard});
    }
    std::fill(chunks_.begin(), chunks_.end(), 0);
    transport_->start_push(0, 0, 0, pieces_, grad_.data<float>(), chunks_);
    push_messages_ = 0;
    for (int owner = 0; owner < world_; ++owner) {
      ledger_.sent(owner, chunks_[static_cast<std::size_t>(owner)]);
      push_messages_ += chunks_[static_cast<std::size_t>(owner)];
    }
    // OdcComm::end_minibatch: our pushes left, every owner learns its counts and waits for them.
    transport_->wait_push(0, "benchmark push");
    const auto expected = ledger_.exchange("the benchmark's exchange of push counts");
    const odc::distributed::UcxTransport::WaitScope waiting(*transport_);
    ledger_.wait(expected, options_.timeout_s, {}, "the benchmark's wait for pushes");
  }

  void mpi_scatter(const Cell& cell) {
    float* acc = accumulator_.data<float>();
    const float* in = reduced_.data<float>();
    MPI_Reduce_scatter_block(grad_.data<float>(), reduced_.data<float>(), static_cast<int>(cell.shard), MPI_FLOAT,
                             MPI_SUM, comm_);
    for (std::int64_t i = 0; i < cell.shard; ++i) acc[i] += in[i];  // as CollectiveComm::finish_reduce
  }

  void check_scatter(const Cell& cell, const char* who) const {
    for (std::int64_t i = 0; i < cell.shard; ++i) {
      const float expected = static_cast<float>(world_) * grad_value(cell.shard * rank_ + i);
      const float got = accumulator_.data<float>()[i];
      if (got != expected) {
        odc::fail("rank {}: {} scatter-accumulate of {} MiB is wrong: accumulator element {} is {}, expected {}",
                  rank_, who, cell.size_mib, i, got, expected);
      }
    }
  }

  // Must run with no pushes in flight to this rank (between barriers).
  void reset_accumulator(const Cell& cell) {
    std::fill_n(accumulator_.data<float>(), cell.shard, 0.0f);
    ledger_.begin();
  }

  void run_scatter(const Cell& cell) {
    float* grad = grad_.data<float>();
    for (std::int64_t j = 0; j < cell.padded; ++j) grad[j] = grad_value(j);
    reset_accumulator(cell);
    MPI_Barrier(comm_);  // no push lands before the owner zeroed its accumulator
    odc_scatter(cell);
    check_scatter(cell, "ODC");
    reset_accumulator(cell);
    mpi_scatter(cell);
    check_scatter(cell, "MPI_Reduce_scatter_block");
    // The ledger restarts before each ODC iteration's barrier; after an iteration every push to
    // this rank was applied (the ledger's wait), so none can race the reset.
    measure("scatter_accumulate", cell, [&] { odc_scatter(cell); }, [&] { mpi_scatter(cell); },
            [&] { ledger_.begin(); });
  }

  // ---- timing ----
  // Barrier, then the slowest rank's time of one call.
  double time_one(const std::function<void()>& body, const std::function<void()>& before) {
    before();
    MPI_Barrier(comm_);
    const double start = now_s();
    body();
    const double local = now_s() - start;
    double slowest = 0;
    MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm_);
    return slowest;
  }

  void measure(const char* op, const Cell& cell, const std::function<void()>& odc_body,
               const std::function<void()>& mpi_body, const std::function<void()>& before_odc) {
    static const std::function<void()> nothing = [] {};
    for (int w = 0; w < options_.warmup; ++w) {
      time_one(odc_body, before_odc);
      time_one(mpi_body, nothing);
    }
    int iters = options_.iters;
    if (iters == 0) {
      // Enough iterations that the faster side still runs min_time_s (bounded by max_iters).
      const double probe = std::min(time_one(odc_body, before_odc), time_one(mpi_body, nothing));
      const double wanted = std::ceil(options_.min_time_s / std::max(probe, 1e-7));
      iters = static_cast<int>(std::clamp(wanted, 3.0, static_cast<double>(options_.max_iters)));
    }
    // ODC and MPI alternate so that load from other processes hits both alike. Local per-iteration
    // times are reduced to the slowest rank after the loop, keeping the loop free of extra traffic.
    std::vector<double> odc_local, mpi_local;
    double odc_wall = 0;
    const double cpu_before = transport_->progress_cpu_seconds();
    double cpu_in_odc = 0;
    for (int it = 0; it < iters; ++it) {
      before_odc();
      MPI_Barrier(comm_);
      const double cpu0 = transport_->progress_cpu_seconds();
      const double t0 = now_s();
      odc_body();
      const double t1 = now_s();
      cpu_in_odc += transport_->progress_cpu_seconds() - cpu0;
      odc_local.push_back(t1 - t0);
      odc_wall += t1 - t0;
      MPI_Barrier(comm_);
      const double t2 = now_s();
      mpi_body();
      mpi_local.push_back(now_s() - t2);
    }
    const double cpu_total = transport_->progress_cpu_seconds() - cpu_before;
    std::vector<double> odc_max(odc_local.size()), mpi_max(mpi_local.size());
    MPI_Allreduce(odc_local.data(), odc_max.data(), iters, MPI_DOUBLE, MPI_MAX, comm_);
    MPI_Allreduce(mpi_local.data(), mpi_max.data(), iters, MPI_DOUBLE, MPI_MAX, comm_);
    if (rank_ != 0) return;

    const double odc_s = median(odc_max);
    const double mpi_s = median(mpi_max);
    const double bytes = static_cast<double>(cell.shard) * sizeof(float) * (world_ - 1);
    const auto round3 = [](double x) { return std::round(x * 1000.0) / 1000.0; };
    nlohmann::ordered_json line = {
        {"bench", "odc_transport"},
        {"op", op},
        {"size_mib", cell.size_mib},
        {"ranks", world_},
        {"odc_gbps", round3(bytes / odc_s / 1e9)},
        {"mpi_gbps", round3(bytes / mpi_s / 1e9)},
        // Equal bytes on both sides, so the ratio of times is the ratio of bandwidths (and stays
        // defined for one rank).
        {"ratio", round3(mpi_s / odc_s)},
        {"odc_ms", round3(odc_s * 1e3)},
        {"mpi_ms", round3(mpi_s * 1e3)},
        {"progress_cpu_s", round3(cpu_in_odc)},
        // Progress-thread CPU per second of (rank 0's) ODC wall time.
        {"progress_cpu_frac", round3(odc_wall > 0 ? cpu_in_odc / odc_wall : 0.0)},
        {"progress_cpu_idle_s", round3(cpu_total - cpu_in_odc)},
        {"iters", iters},
        {"ucx_tls", ucx_tls_},
        {"mpi_btl", mpi_btl_},
        {"chunk_bytes", options_.chunk_bytes},
        {"network_chunk_bytes", options_.network_chunk_bytes},
        {"max_inflight", options_.max_inflight},
        {"direct_load", options_.direct_load},
        {"push_protocol", options_.slot_pushes ? "slot" : "message"},
    };
    // Messages one ODC iteration sent from this rank: more than one per owner means the message
    // path (the owner's region is not mapped here, e.g. over TCP); one per owner means slots, or
    // a shard that fits one chunk.
    if (std::string_view(op) == "scatter_accumulate") line["push_messages"] = push_messages_;
    if (std::string_view(op) == "gather") {
      line["gather_protocol"] = gather_protocol_;
      std::vector<std::string> used;
      for (int owner = 0; owner < world_; ++owner) {
        used.emplace_back(odc::distributed::gather_protocol_name(transport_->gather_protocol(owner)));
      }
      line["gather_protocols"] = used;
    }
    std::cout << line.dump() << std::endl;
  }

  Options options_;
  int rank_;
  int world_;
  MPI_Comm comm_;
  std::unique_ptr<odc::distributed::MpiHostGroup> group_;  // the transport's and the ledger's
  odc::distributed::PushLedger ledger_;
  odc::distributed::Completion gather_done_{world_};
  std::vector<odc::distributed::ShardPiece> pieces_;  // one scatter's pieces, per owner
  std::vector<std::int64_t> chunks_;                   // one scatter's chunks, per owner
  odc::Tensor full_;         // gathered unit; the client's view
  odc::Tensor grad_;         // full gradient pushed / reduce-scattered
  odc::Tensor accumulator_;  // this owner's fp32 gradient accumulator
  odc::Tensor reduced_;      // MPI_Reduce_scatter_block's output
  std::string ucx_tls_;
  std::string mpi_btl_;
  std::int64_t push_messages_ = 0;  // of the last ODC scatter iteration (rank 0 reports)
  std::string gather_protocol_;     // of the gather being measured
  // Last, so it is destroyed first: its progress thread uses the buffers and completions above.
  std::unique_ptr<odc::distributed::UcxTransport> transport_;
};

// The start-up deadline over MPI initialisation: --timeout-s (read quietly before MPI starts; the
// default when the command line does not parse, where the real parse reports it), at least
// distributed::kMinStartupTimeoutS.
double startup_timeout_s(int argc, char** argv) {
  double timeout = Options{}.timeout_s;
  try {
    timeout = parse_options(odc::cli::parse(command(), argc, argv)).timeout_s;
  } catch (...) {
  }
  return odc::distributed::startup_timeout(timeout);
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_mpi_tool("odc-bench", argc, argv, [&](const odc::distributed::MpiSession& mpi) {
    Bench bench(parse_options(odc::cli::parse(command(), argc, argv)), mpi.rank(), mpi.world_size());
    bench.run();
    return 0;
  }, /*mpi_optional=*/false, startup_timeout_s(argc, argv));
}

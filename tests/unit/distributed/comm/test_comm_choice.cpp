// choose_comm over its whole table: every combination of world size, comm kind, comm.transport,
// gather dtype, host staging, state device, MPI, hosts and CUDA build either names a comm or
// fails naming why; the rules hold on every row, and the rows users meet give what the docs say.
#include <map>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/distributed/comm/comm_choice.h"

using namespace odc;
using namespace odc::distributed;

namespace {

// Every combination, and its result (the choice, or the error's text).
struct Row {
  CommFacts facts;
  std::optional<CommChoice> choice;
  std::string error;
};

std::vector<Row> whole_table() {
  std::vector<Row> rows;
  for (const int world : {1, 2, 4}) {
    for (const auto kind : {CommKind::odc, CommKind::collective}) {
      for (const auto transport : {TransportKind::automatic, TransportKind::ipc, TransportKind::ucx}) {
        for (const auto dtype : {GatherDtype::f32, GatherDtype::bf16}) {
          for (const bool staging : {false, true}) {
            for (const std::string device : {"", "CUDA device 0"}) {
              for (const bool mpi : {false, true}) {
                for (const int hosts : {1, 2}) {
                  if (!mpi && hosts > 1) continue;  // a group without MPI is one host
                  for (const bool cuda : {false, true}) {
                    Row row;
                    row.facts = {world, kind, transport, dtype, staging, device, mpi, hosts, cuda};
                    try {
                      row.choice = choose_comm(row.facts);
                    } catch (const Error& e) {
                      row.error = e.what();
                    }
                    rows.push_back(std::move(row));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return rows;
}

}  // namespace

TEST_CASE("choose_comm: the rules hold on every row of the table", "[distributed]") {
  const auto rows = whole_table();
  CHECK(rows.size() == 3 * 2 * 3 * 2 * 2 * 2 * 3 * 2);
  std::map<CommBuild, int> seen;
  for (const auto& row : rows) {
    const CommFacts& f = row.facts;
    const bool on_device = !f.state_device.empty();
    INFO("world " << f.world_size << ", " << comm_kind_name(f.kind) << ", transport " << static_cast<int>(f.transport)
                  << ", " << gather_dtype_name(f.gather_dtype) << ", staging " << f.host_staging << ", device '"
                  << f.state_device << "', mpi " << f.over_mpi << ", hosts " << f.hosts << ", cuda " << f.cuda_build
                  << " -> " << (row.choice ? comm_build_name(row.choice->build) : row.error));
    // One rank never communicates, whatever else is asked.
    if (f.world_size == 1) {
      REQUIRE(row.choice);
      CHECK(*row.choice == CommChoice{CommBuild::local, false});
      continue;
    }
    if (!row.choice) {
      CHECK_FALSE(row.error.empty());
      continue;
    }
    const CommBuild b = row.choice->build;
    ++seen[b];
    CHECK(b != CommBuild::local);
    // The kind asked for is the kind given.
    CHECK((f.kind == CommKind::collective) == (b == CommBuild::mpi_collective || b == CommBuild::nccl_collective));
    // MPI collectives only over MPI and on host state; NCCL only for device state in a CUDA build.
    if (b == CommBuild::mpi_collective) CHECK((f.over_mpi && !on_device));
    if (b == CommBuild::nccl_collective) CHECK((on_device && f.cuda_build));
    // Device memory through CUDA IPC needs CUDA.
    if (b == CommBuild::odc_ipc && on_device) CHECK(f.cuda_build);
    // bf16 gathers are NCCL's and IPC's.
    if (f.gather_dtype == GatherDtype::bf16) CHECK((b == CommBuild::nccl_collective || b == CommBuild::odc_ipc));
    // Host comms serving device state are staged, and staged only then or when asked.
    const bool host_comm = b == CommBuild::mpi_collective || b == CommBuild::odc_ucx;
    CHECK(row.choice->staged == (host_comm && (on_device || f.host_staging)));
    // An explicit transport is obeyed; auto takes ipc exactly for device state on one host or without MPI.
    if (f.kind == CommKind::odc) {
      if (f.transport == TransportKind::ipc) CHECK(b == CommBuild::odc_ipc);
      if (f.transport == TransportKind::ucx) CHECK(b == CommBuild::odc_ucx);
      if (f.transport == TransportKind::automatic) {
        CHECK((b == CommBuild::odc_ipc) == ((on_device && f.hosts == 1) || !f.over_mpi));
      }
    }
  }
  // Every comm is reachable.
  for (const auto b : {CommBuild::mpi_collective, CommBuild::nccl_collective, CommBuild::odc_ipc, CommBuild::odc_ucx}) {
    INFO(comm_build_name(b));
    CHECK(seen[b] > 0);
  }
}

TEST_CASE("choose_comm: the rows users meet, and the errors that name what to change", "[distributed]") {
  const auto choose = [](CommFacts f) { return choose_comm(f); };
  // A CPU job under mpirun on one host: ODC over UCX (auto), the collective over MPI.
  CHECK(choose({2, CommKind::odc, TransportKind::automatic, GatherDtype::f32, false, "", true, 1, true}) ==
        CommChoice{CommBuild::odc_ucx, false});
  CHECK(choose({2, CommKind::collective, TransportKind::automatic, GatherDtype::f32, false, "", true, 1, true}) ==
        CommChoice{CommBuild::mpi_collective, false});
  // odc-run --local on a CPU: IPC (auto), or UCX when asked.
  CHECK(choose({2, CommKind::odc, TransportKind::automatic, GatherDtype::f32, false, "", false, 1, false}) ==
        CommChoice{CommBuild::odc_ipc, false});
  CHECK(choose({2, CommKind::odc, TransportKind::ucx, GatherDtype::f32, false, "", false, 1, false}) ==
        CommChoice{CommBuild::odc_ucx, false});
  // GPUs: one host takes CUDA IPC, several hosts UCX staged through host memory, collectives NCCL.
  CHECK(choose({8, CommKind::odc, TransportKind::automatic, GatherDtype::bf16, false, "CUDA device 0", true, 1, true}) ==
        CommChoice{CommBuild::odc_ipc, false});
  CHECK(choose({16, CommKind::odc, TransportKind::automatic, GatherDtype::f32, false, "CUDA device 0", true, 2, true}) ==
        CommChoice{CommBuild::odc_ucx, true});
  CHECK(choose({8, CommKind::collective, TransportKind::automatic, GatherDtype::bf16, false, "CUDA device 0", true, 1,
                true}) == CommChoice{CommBuild::nccl_collective, false});
  // debug.host_staging stages host state too.
  CHECK(choose({2, CommKind::odc, TransportKind::ucx, GatherDtype::f32, true, "", true, 1, false}) ==
        CommChoice{CommBuild::odc_ucx, true});
  CHECK_THROWS_WITH(choose({2, CommKind::collective, TransportKind::automatic, GatherDtype::f32, false, "", false, 1, false}),
                    Catch::Contains("the collective comm on host memory runs over MPI: launch the job with odc-run"));
  CHECK_THROWS_WITH(choose({2, CommKind::collective, TransportKind::automatic, GatherDtype::bf16, false, "", true, 1, true}),
                    Catch::Contains("comm.gather_dtype bf16 on host memory"));
  CHECK_THROWS_WITH(choose({2, CommKind::odc, TransportKind::ucx, GatherDtype::bf16, false, "", true, 1, true}),
                    Catch::Contains("comm.gather_dtype bf16 needs comm.transport ipc"));
  CHECK_THROWS_WITH(choose({2, CommKind::collective, TransportKind::automatic, GatherDtype::f32, false, "CUDA device 0",
                            true, 1, false}),
                    Catch::Contains("the collective comm for CUDA device 0 state needs a CUDA build (NCCL)"));
  CHECK_THROWS_WITH(choose({2, CommKind::odc, TransportKind::ipc, GatherDtype::f32, false, "CUDA device 0", true, 1,
                            false}),
                    Catch::Contains("the ipc transport for CUDA device 0 state needs a CUDA build"));
  CHECK(parse_odc_transport("ipc") == TransportKind::ipc);
  CHECK_THROWS_WITH(parse_odc_transport("tcp"), Catch::Contains("unknown comm.transport 'tcp'"));
  CHECK(comm_build_name(CommBuild::nccl_collective) == "nccl");
}

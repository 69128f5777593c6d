#pragma once
// choose_comm: which comm a run gets, decided from plain facts about it (no group, no device, no
// memory is touched), so the whole decision is one table a unit test walks through
// (tests/unit/distributed/comm/test_comm_choice.cpp). make_comm (comm_factory.h) builds what it says.
//
//   one rank                      local
//   collective, device state      nccl (a CUDA build)
//   collective, host state        mpi (an MPI group; fp32 gathers), staged with debug.host_staging
//   odc, transport ipc            ipc (the ranks' memory mapped: one host; CUDA IPC for device state)
//   odc, transport ucx            ucx (host memory; any group; fp32 gathers), staged for device
//                                 state or with debug.host_staging
//   odc, transport auto           ipc for device state on one host, or a group without MPI; else ucx
#include <string>
#include <string_view>

#include "odc/distributed/comm/comm.h"

namespace odc::distributed {

// How ODC moves data (comm.transport).
enum class TransportKind { automatic, ucx, ipc };
TransportKind parse_odc_transport(std::string_view name);  // "auto" | "ucx" | "ipc"

enum class CommBuild { local, mpi_collective, nccl_collective, odc_ipc, odc_ucx };
std::string_view comm_build_name(CommBuild build);  // "local", "mpi", "nccl", "ipc", "ucx"

struct CommFacts {
  int world_size = 1;
  CommKind kind = CommKind::odc;
  TransportKind transport = TransportKind::automatic;
  GatherDtype gather_dtype = GatherDtype::f32;
  bool host_staging = false;  // debug.host_staging
  // The state lives in this device's memory (empty: host memory, a CPU backend or none).
  std::string state_device;
  bool over_mpi = false;  // the group's ranks meet over MPI (HostGroup::over_mpi)
  int hosts = 1;          // hosts the group spans (a group without MPI is one host)
  bool cuda_build = false;
};

struct CommChoice {
  CommBuild build = CommBuild::local;
  // A comm over host memory serving state on a device (StagedComm around it).
  bool staged = false;
  bool operator==(const CommChoice&) const = default;
};

// The comm for `facts`, or odc::Error naming the combination that cannot run and what to change.
CommChoice choose_comm(const CommFacts& facts);

}  // namespace odc::distributed

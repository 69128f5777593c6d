#include "odc/distributed/comm/comm_choice.h"

#include "odc/core/error.h"

namespace odc::distributed {

TransportKind parse_odc_transport(std::string_view name) {
  if (name == "auto") return TransportKind::automatic;
  if (name == "ucx") return TransportKind::ucx;
  if (name == "ipc") return TransportKind::ipc;
  fail("unknown comm.transport '{}': expected auto, ucx or ipc", name);
}

std::string_view comm_build_name(CommBuild build) {
  switch (build) {
    case CommBuild::local: return "local";
    case CommBuild::mpi_collective: return "mpi";
    case CommBuild::nccl_collective: return "nccl";
    case CommBuild::odc_ipc: return "ipc";
    case CommBuild::odc_ucx: return "ucx";
  }
  return "?";
}

CommChoice choose_comm(const CommFacts& facts) {
  if (facts.world_size == 1) return {CommBuild::local, false};
  const bool on_device = !facts.state_device.empty();
  if (facts.kind == CommKind::collective) {
    if (on_device) {
      if (!facts.cuda_build) fail("the collective comm for {} state needs a CUDA build (NCCL)", facts.state_device);
      return {CommBuild::nccl_collective, false};
    }
    if (!facts.over_mpi) {
      fail("the collective comm on host memory runs over MPI: launch the job with odc-run or mpirun (train.comm odc "
           "runs without MPI on one host)");
    }
    if (facts.gather_dtype != GatherDtype::f32) {
      fail("comm.gather_dtype {} on host memory: the MPI collectives gather the fp32 masters (bf16 gathers are NCCL's "
           "and the ipc transport's)", gather_dtype_name(facts.gather_dtype));
    }
    return {CommBuild::mpi_collective, facts.host_staging};
  }
  TransportKind transport = facts.transport;
  if (transport == TransportKind::automatic) {
    // A group without MPI is one host by construction (odc-run --local, threads).
    const bool one_host = !facts.over_mpi || facts.hosts == 1;
    transport = (on_device && one_host) || !facts.over_mpi ? TransportKind::ipc : TransportKind::ucx;
  }
  if (transport == TransportKind::ipc) {
    if (on_device && !facts.cuda_build) fail("the ipc transport for {} state needs a CUDA build", facts.state_device);
    return {CommBuild::odc_ipc, false};
  }
  if (facts.gather_dtype != GatherDtype::f32) {
    fail("comm.gather_dtype {} needs comm.transport ipc (the UCX transport gathers the fp32 masters)",
         gather_dtype_name(facts.gather_dtype));
  }
  return {CommBuild::odc_ucx, on_device || facts.host_staging};
}

}  // namespace odc::distributed

#pragma once
// The keys of the comm's options (CommOptions) besides the transports' (transport_keys.h): which
// comm (train.comm), the layout across hosts (train.sharding) and the comm.* choices, declared once
// (core/key.h).
#include <cstdint>
#include <string>
#include "odc/core/key.h"

namespace odc::keys {

inline const Key<std::string> train_comm{"train.comm", "odc", "communication: odc (on-demand) or collective (FSDP-style)", {"odc", "collective"}};
inline const Key<std::string> train_sharding{"train.sharding", "full", "parameter layout across hosts: full (sharded over all ranks), hybrid (sharded within a host, "
              "replicated across hosts, gradients summed across hosts once per minibatch) or hpz (full, plus a "
              "secondary copy sharded within each host that serves the minibatch's gathers); one host: full", {"full", "hybrid", "hpz"}};
inline const Key<bool> comm_deterministic{"comm.deterministic", false, "ODC owners add gradient pushes in a fixed order (per-client buffers folded in rank order): two runs, "
              "and a resumed run, give the same bits; costs one fp32 copy of the parameters per rank. The "
              "collective and single-rank paths are always deterministic"};
inline const Key<std::string> comm_transport{"comm.transport", "auto", "how ODC moves data: ucx (UCX one-sided gets and pushes, any hosts), ipc (memory shared by the ranks "
              "of one host: CUDA IPC on GPUs, shared memory on CPUs), auto (ipc for GPU state or a job started "
              "without MPI, else ucx)", {"auto", "ucx", "ipc"}};
inline const Key<std::string> comm_gather_dtype{"comm.gather_dtype", "fp32", "element type of gathered unit weights: fp32 (the masters, as the paper's reference under ODC) or bf16 "
              "(a bf16 copy of every shard made at the minibatch start: half the bytes; needs model.dtype bfloat16, "
              "whose compute rounds the weights to bf16 anyway)", {"fp32", "bf16"}};
inline const Key<bool> debug_host_staging{"debug.host_staging", false, "stage the host comms (odc over ucx, collective over MPI) through the model backend's memory even for "
              "host state: the path GPU ranks on several hosts take, exercised on a CPU"};

}  // namespace odc::keys

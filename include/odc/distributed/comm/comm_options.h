#pragma once
// What a run asks of its comm (train.comm, comm.*, debug.host_staging) and the facts choose_comm
// decides from: what make_comm builds from, and what the memory plan sizes (comm_buffers.h) without
// building anything.
#include <string>

#include "odc/distributed/comm/comm_choice.h"
#include "odc/distributed/comm/comm_keys.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/shard/sharding.h"
#include "odc/distributed/transport/transport_options.h"

namespace odc::distributed {

struct CommOptions {
  // The fields a key sets take their defaults from its declaration (comm_keys.h, transport_keys.h).
  CommKind kind = parse_comm_kind(keys::train_comm.default_value());  // train.comm
  TransportKind odc_transport = parse_odc_transport(keys::comm_transport.default_value());  // comm.transport
  GatherDtype gather_dtype = parse_gather_dtype(keys::comm_gather_dtype.default_value());  // comm.gather_dtype
  TransportOptions transport;  // ODC: chunking, in-flight limit, timeout, direct loads (comm.*)
  // comm.deterministic: ODC's ordered accumulation (bitwise reproducible); the others always are
  bool deterministic = keys::comm_deterministic.default_value();
  // Stage a host comm through the backend's memory even for host state (debug.host_staging: the
  // path GPU state takes across hosts, exercised on a CPU).
  bool host_staging = keys::debug_host_staging.default_value();
  // What the comm's host store holds (StoreContents::weights: masters only, for a copy of the
  // weights that only serves gathers, as hpz's secondary shards).
  StoreContents store_contents = StoreContents::all;
};

// The facts choose_comm decides from: make_comm's (from its group and device), and the memory
// plan's (train/plan/memory_plan.h: from the run's settings, for this machine or another).
// `state_device`: the device holding the state (empty: host memory); `hosts`: comm_hosts.
CommFacts comm_facts(const CommOptions& options, int world_size, std::string state_device, bool over_mpi, int hosts);

// The hosts a run's shard group spans, of the `hosts` its whole group spans: one under hybrid
// sharding, whose shard group is a host's ranks. What comm_facts takes as `hosts`.
inline int shard_group_hosts(Sharding sharding, int hosts) { return sharding == Sharding::hybrid ? 1 : hosts; }

}  // namespace odc::distributed

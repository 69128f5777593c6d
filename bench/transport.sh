#!/usr/bin/env bash
# ODC transport vs MPI collectives (odc-bench) on 2 ranks, three times: with UCX's default
# transports (shared memory on one node), with UCX_TLS=tcp,self, the path a multi-node run without
# shared memory takes (that run also moves MPI onto TCP, OMPI_MCA_btl=tcp,self, so both sides cross
# the same wire), and across 2 network-namespace hosts (one rank each: TCP between hosts, lines
# tagged "hosts":2). Prints only the JSON lines (one per op and unit size) on stdout; builds
# nothing. Runtime: about 3-4 minutes on an idle 2-core machine.
# Usage: bench/transport.sh [BUILD_DIR]   (or BUILD_DIR=... ; default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-${BUILD_DIR:-$root/build}}"
bench="$build/bin/odc-bench"
if [[ ! -x "$bench" ]]; then
  echo "transport.sh: $bench not found; build it first (ninja -C $build odc-bench)" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Each rank runs a compute thread and a progress thread: no core binding (mpirun binds each of
# 2 ranks to one core by default).
run=(mpirun -np 2 --bind-to none)

# Shared memory: all sizes; each cell adapts its iterations to >= 0.5 s per side.
env -u UCX_TLS -u OMPI_MCA_btl "${run[@]}" "$bench" --sizes-mib 1,16,64,256

# TCP (loopback here, the lo and eth0 rails): every size; cells over TCP take longer, so each side
# runs >= 0.3 s (>= 3 iterations) instead of 0.5 s. Gathers by both protocols: one-sided gets
# (UCX emulates them over TCP) and requests answered by the owner's progress thread (what
# comm.gather_protocol auto picks here). About 1-2 minutes on this 2-core box.
UCX_TLS=tcp,self OMPI_MCA_btl=tcp,self "${run[@]}" -x UCX_TLS -x OMPI_MCA_btl "$bench" --sizes-mib 1,16,64,256 \
  --min-time-s 0.3 --gather-protocol get,request

# Across hosts: 2 network-namespace hosts (scripts/netns-hosts.sh) with one rank each, so nothing
# is shared between the ranks and UCX and MPI both take TCP over the hosts' veth link, as between
# two machines without RDMA; comm.gather_protocol auto (request gathers there) and the default
# chunking. Needs root (skipped with a note otherwise); about a minute.
hosts="$root/scripts/netns-hosts.sh"
if reason=$("$hosts" check 2>&1); then
  export ODC_NETNS="${ODC_NETNS:-odctr}"
  trap '"$hosts" down > /dev/null 2>&1' EXIT
  "$hosts" up 2 > /dev/null
  OMP_NUM_THREADS=1 "$hosts" mpirun --npernode 1 -np 2 --bind-to none "$bench" --sizes-mib 16,64,256 --min-time-s 0.3 \
    | sed 's/^{"bench":"odc_transport"/{"bench":"odc_transport","hosts":2/'
else
  echo "transport.sh: no run across namespace hosts: $reason" >&2
fi

#!/usr/bin/env bash
# ODC transport vs MPI collectives (odc-bench) on 2 ranks, twice: with UCX's default transports
# (shared memory on one node) and with UCX_TLS=tcp,self, the path a multi-node run without shared
# memory takes; that run also moves MPI onto TCP (OMPI_MCA_btl=tcp,self) so both sides cross the
# same wire. Prints only the JSON lines (one per op and unit size) on stdout; builds nothing.
# Runtime: about 2-3 minutes on an idle 2-core machine.
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

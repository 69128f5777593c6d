#!/usr/bin/env bash
# ODC transport vs MPI collectives (odc-bench) on 2 ranks, twice: with UCX's default transports
# (shared memory on one node) and with UCX_TLS=tcp,self, the path a multi-node run without shared
# memory takes; that run also moves MPI onto TCP (OMPI_MCA_btl=tcp,self) so both sides cross the
# same wire. Prints only the JSON lines (one per op and unit size) on stdout; builds nothing.
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
# Each rank runs a compute thread and a progress thread: no core binding (see docs/ENV).
run=(mpirun -np 2 --bind-to none)

# Shared memory: all sizes; each cell adapts its iterations to >= 0.5 s per side.
env -u UCX_TLS "${run[@]}" "$bench" --sizes-mib 1,16,64,256

# TCP (loopback here): 256 MiB units take several seconds per iteration on both sides over
# loopback TCP on 2 cores; they are skipped to keep this script within a few minutes, and a
# line per op says so.
UCX_TLS=tcp,self OMPI_MCA_btl=tcp,self "${run[@]}" -x UCX_TLS -x OMPI_MCA_btl "$bench" --sizes-mib 1,16,64 --min-time-s 0.3
for op in gather scatter_accumulate; do
  printf '{"bench":"odc_transport","op":"%s","size_mib":256,"ranks":2,"ucx_tls":"tcp,self","mpi_btl":"tcp,self","skipped":"256 MiB over TCP skipped to bound the runtime of bench/transport.sh; run odc-bench --sizes-mib 256 with UCX_TLS=tcp,self to measure it"}\n' "$op"
done

#!/usr/bin/env bash
# Installs the system packages (scripts/setup.sh), configures and builds into build/ (or $ODC_BUILD_DIR).
# Extra arguments go to CMake, e.g. scripts/build.sh -DODC_CUDA=OFF; ODC_BUILD_TARGETS="a b" builds only those.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
targets=()
for t in ${ODC_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" ${targets[@]+"${targets[@]}"}

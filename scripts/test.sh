#!/usr/bin/env bash
# The one command that proves the project: set-up, build, then the whole test suite (unit tests,
# PyTorch parity, command-line and multi-rank tests) through ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"

#!/usr/bin/env bash
# The one command that proves the project: set-up, build, then the whole test suite (unit tests,
# PyTorch parity, command-line and multi-rank tests) through ctest.
#
#   scripts/test.sh                              the suite (CI runs exactly this)
#   scripts/test.sh --sanitize address,undefined  the whole suite built with ASan + UBSan (+ LeakSanitizer)
#                                                 in build-sanitize-address-undefined/
#   scripts/test.sh --sanitize thread            ThreadSanitizer build (build-sanitize-thread/, -O1) of the
#                                                 multi-rank tests and odc-train, running the threaded
#                                                 tests: UCX transport and ODC progress thread, watchdog,
#                                                 ODC/collective training, odc-train under mpirun,
#                                                 preemption and rank failure
# Other arguments go to CMake (scripts/build.sh). Sanitizer builds leave the CUDA backend out.
# Suppressions (only for the uninstrumented system libraries: MPI, UCX, oneDNN, OpenMP) live in
# tests/sanitizers/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=""
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) [ $# -ge 2 ] || { echo "test.sh: --sanitize needs a value (address,undefined or thread)" >&2; exit 2; }
                sanitize="$2"; shift 2 ;;
    --sanitize=*) sanitize="${1#--sanitize=}"; shift ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done

ctest_args=()
if [ -n "$sanitize" ]; then
  case "$sanitize" in
    address,undefined|undefined,address|address|undefined|thread) ;;
    *) echo "test.sh: unknown --sanitize '$sanitize' (use address,undefined or thread)" >&2; exit 2 ;;
  esac
  export ODC_BUILD_DIR="${ODC_BUILD_DIR:-$root/build-sanitize-${sanitize//,/-}}"
  cmake_args+=("-DODC_SANITIZE=$sanitize" -DODC_CUDA=OFF)
  supp="$root/tests/sanitizers"
  # fast_unwind_on_malloc=0: the system libraries have no frame pointers; only full unwinding gives
  # their allocations stacks that the suppressions can match. MPI keeps its plugins loaded until
  # exit for the same reason (an unloaded plugin's frames have no name).
  export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:check_initialization_order=1"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:report_signal_unsafe=0"
  # UCX patches malloc/mmap to track registered memory; the sanitizers own malloc.
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no
  if [ "$sanitize" = thread ]; then
    export ODC_BUILD_TARGETS="${ODC_BUILD_TARGETS:-odc_mpi_tests odc-train odc-data}"
    cmake_args+=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1\ -g\ -DNDEBUG)
    ctest_args+=(-R '^(mpi/|cli/test_odc_train_mpi|cli/test_preemption|cli/test_rank_failure)')
  fi
fi
build="${ODC_BUILD_DIR:-$root/build}"

"$root/scripts/build.sh" ${cmake_args[@]+"${cmake_args[@]}"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" ${ctest_args[@]+"${ctest_args[@]}"}

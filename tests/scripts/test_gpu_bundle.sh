#!/usr/bin/env bash
# scripts/gpu-bundle.sh and scripts/gpu-check.sh --dry-run, end to end on this machine (no GPU):
# the bundle is made from the current build, holds every program of the check, none of the
# libraries the lent machine brings itself (glibc, CUDA), stays under its size budget; the dry
# run of the check passes on it, writes exactly its two files and at most 40 summary lines; and
# it fails, naming the step, on a bundle whose file was altered after packing. The dry run prints the
# GPU run's plan, the long-context memory plans, keeps the bundle's library path off python3, and
# defers (exit 3) what a deadline leaves no time for.
#
#   tests/scripts/test_gpu_bundle.sh BUILD_DIR WORK_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "test_gpu_bundle: FAIL: $*" >&2; exit 1; }

ODC_XZ_LEVEL=1 "$root/scripts/gpu-bundle.sh" --build-dir "$build" "$work/bundle.tar.xz" >"$work/bundle.json" \
  || fail "gpu-bundle.sh failed"
cat "$work/bundle.json"
bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$work/bundle.json")
[ "$bytes" -le $((48 * 1024 * 1024)) ] || fail "bundle of $bytes bytes is over 48 MiB"

mkdir -p "$work/unpacked"
tar -C "$work/unpacked" -xJf "$work/bundle.tar.xz"
b="$work/unpacked/odc-gpu"
for p in odc_cuda_tests gpu_ceilings gpu_nccl gpu_gemm gpu_attention gpu_model_parity gpu_model_throughput odc-train odc-run comm_bandwidth; do
  [ -x "$b/bin/$p" ] || fail "the bundle lacks bin/$p"
done
for f in gpu-check.sh COMMIT BUNDLE.json MANIFEST.sha256 py/gpu_model_torch.py py/gpu_attention_torch.py \
         py/gpu_check_summary.py py/gpu_check_train.py py/gpu_check_ipc.py configs/gpu-check-train.yaml configs/gpu-check-ipc.yaml configs/gpu-check-rl.yaml data/gpu-train.jsonl \
         data/rl-prompts.jsonl data/tokenizer/tokenizer.json; do
  [ -f "$b/$f" ] || fail "the bundle lacks $f"
done
if ls "$b/lib" | grep -E '^(libc\.|libm\.|libpthread|libdl\.|ld-linux|libcuda\.|libcudart|libcublas)'; then
  fail "the bundle carries libraries the lent machine provides"
fi
ls "$b/lib" | grep -q '^libdnnl' || fail "the bundle lacks oneDNN, which odc-train loads"

# The dry run passes on the archive, with exactly its two files.
"$root/scripts/gpu-check.sh" --dry-run "$work/bundle.tar.xz" "$work/out" >"$work/dry.log" 2>&1 \
  || { cat "$work/dry.log"; fail "the dry run failed"; }
[ "$(ls "$work/out" | sort | tr '\n' ' ')" = "gpu-check.tar.gz summary.txt " ] || fail "OUT holds $(ls "$work/out")"
lines=$(wc -l <"$work/out/summary.txt")
[ "$lines" -le 40 ] || fail "the summary has $lines lines"
grep -q "steps: all .* run passed" "$work/out/summary.txt" || { cat "$work/out/summary.txt"; fail "summary does not pass"; }
# (listed into a file first: grep -q ending a pipe early would fail tar with SIGPIPE under pipefail)
tar -tzf "$work/out/gpu-check.tar.gz" >"$work/archive.list"
grep -q 'logs/steps.tsv' "$work/archive.list" || fail "the archive lacks logs/steps.tsv"
grep -q "rerun bitwise yes, resume bitwise yes" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the trainer step did not rerun and resume bit for bit"; }
# Several ranks through odc-run --local over the IPC transport (shared memory here, CUDA IPC on
# the GPU), and the bandwidth bench under the same launcher.
grep -Eq "^rl \(online GRPO loop\): 3 iterations, 6 steps, reward .*rerun bitwise yes, resume bitwise yes" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the rl step did not rerun and resume the online loop bit for bit"; }
grep -q "ipc training ok" "$work/out/summary.txt" && grep -q "bf16 gathers equal fp32 gathers bitwise: yes" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the ipc-train step did not give the 1-rank losses and bitwise bf16 gathers"; }
grep -Eq "^comm ipc x2 .*gather [0-9]+ GB/s" "$work/out/summary.txt" || { cat "$work/out/summary.txt"; fail "no comm-bandwidth figures"; }

# The plan of the GPU run comes first, with each step's expected seconds and the first call's total.
grep -q "gpu-check plan of the GPU run" "$work/dry.log" && grep -Eq "^  long-context +[0-9]+ +[0-9]+ +[0-9]+ " "$work/dry.log" \
  && grep -Eq "first call: [0-9]+ steps in about [0-9]+s of 270s" "$work/dry.log" || { cat "$work/dry.log"; fail "no plan printed"; }
# The long-context cases' memory plans (Qwen2-1.5B, 32K and 64K tokens) in the summary.
grep -Eq "^  65536 tok: plan [0-9.]+ GiB pooled, peak [0-9.]+ GiB; fits" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "no long-context plan in the summary"; }
# The bundle's library path reaches its own programs only: python3 and nvidia-smi see the machine's.
mkdir -p "$work/archive"
tar -C "$work/archive" -xzf "$work/out/gpu-check.tar.gz" logs/env.log
grep -q "^machine LD_LIBRARY_PATH=" "$work/archive/logs/env.log" || fail "env.log does not show the machine's library path"
if grep -q "^machine LD_LIBRARY_PATH=.*odc-gpu/lib" "$work/archive/logs/env.log"; then
  fail "the bundle's lib directory is on the library path of python3 / nvidia-smi"
fi

# A deadline that leaves no time after the bundle's own steps defers every other step: exit 3 (none
# failed), each named with the --only that runs it.
set +e
"$root/scripts/gpu-check.sh" --dry-run --deadline 16 "$work/bundle.tar.xz" "$work/out3" >"$work/dry3.log" 2>&1; rc=$?
set -e
[ "$rc" -eq 3 ] || { cat "$work/dry3.log"; fail "a check with deferred steps exited $rc, not 3"; }
grep -q "steps: all 3 run passed in .*; not run (deadline; rerun with --only start-gpu_ceilings," "$work/out3/summary.txt" \
  || { cat "$work/out3/summary.txt"; fail "the deferred steps are not named with their --only"; }
grep -q "gpu-check: deferred: scripts/gpu-check.sh --only start-gpu_ceilings," "$work/dry3.log" || fail "no --only printed last"

# An altered file is caught by the manifest, and the check fails naming it.
printf 'x' >>"$b/py/gpu_model_torch.py"
if "$root/scripts/gpu-check.sh" --dry-run "$b" "$work/out2" >"$work/dry2.log" 2>&1; then
  fail "the dry run passed on an altered bundle"
fi
grep -q "FAILED manifest" "$work/out2/summary.txt" || { cat "$work/out2/summary.txt"; fail "the summary does not name the manifest"; }

# Usage errors exit 2.
set +e
"$root/scripts/gpu-check.sh" --deadline soon x y >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "a bad --deadline exited $rc, not 2"
set +e
ODC_CHECK_SET="model.attention" "$root/scripts/gpu-check.sh" x y >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "an ODC_CHECK_SET entry without '=' exited $rc, not 2"
echo "test_gpu_bundle: all checks passed ($bytes bytes)"

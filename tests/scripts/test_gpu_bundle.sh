#!/usr/bin/env bash
# scripts/gpu-bundle.sh and scripts/gpu-check.sh --dry-run, end to end on this machine (no GPU):
# the bundle is made from the current build, holds every program of the check, none of the
# libraries the lent machine brings itself (glibc, CUDA), stays under its size budget; the dry
# run of the check passes on it, writes its files (at most 7: what the lent machine returns) and
# at most 50 summary lines; and it fails, naming the step, on a bundle whose file was altered after
# packing. The dry run prints the GPU run's plan in its riskiest-first order, the long-context
# memory plans, keeps the bundle's library path off python3, and defers (exit 3) what a deadline
# leaves no time for. A call cut at any moment leaves what finished: killed with SIGKILL at three
# random moments, OUT still holds a readable steps.tsv and summary; a step killed by the
# deadline's limit is reported as cut, never failed; --size sizes the calls from the device time.
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
for p in odc_cuda_tests gpu_ceilings gpu_nccl gpu_gemm gpu_attention gpu_model_parity gpu_model_throughput odc-train odc-run \
         comm_bandwidth rollout_throughput; do
  [ -x "$b/bin/$p" ] || fail "the bundle lacks bin/$p"
done
for f in gpu-check.sh COMMIT BUNDLE.json MANIFEST.sha256 py/gpu_model_torch.py py/gpu_attention_torch.py \
         py/gpu_check_summary.py py/gpu_check_train.py py/gpu_check_ipc.py py/gpu_check_context.py configs/gpu-check-train.yaml configs/gpu-check-ipc.yaml \
         configs/gpu-check-rl.yaml configs/gpu-check-context.yaml data/gpu-train.jsonl \
         data/rl-prompts.jsonl data/tokenizer/tokenizer.json; do
  [ -f "$b/$f" ] || fail "the bundle lacks $f"
done
if ls "$b/lib" | grep -E '^(libc\.|libm\.|libpthread|libdl\.|ld-linux|libcuda\.|libcudart|libcublas)'; then
  fail "the bundle carries libraries the lent machine provides"
fi
ls "$b/lib" | grep -q '^libdnnl' || fail "the bundle lacks oneDNN, which odc-train loads"

# OUT as a cut call leaves it: steps.tsv with its header and 7 fields a row, statuses from the
# check's list, a summary whose first line names the check, valid JSON lines, an archive that
# gunzips (files are replaced by renames), nothing beyond the 7 files the lent machine returns.
check_out() {  # DIR WHAT
  local dir=$1 what=$2 n
  n=$(find "$dir" -maxdepth 1 -type f ! -name '.*.part' | wc -l)
  [ "$n" -le 7 ] || fail "$what: OUT holds $n files: $(ls "$dir")"
  [ -s "$dir/summary.txt" ] && head -n 1 "$dir/summary.txt" | grep -q '^ODC GPU check' \
    || fail "$what: no readable summary.txt ($(head -c 200 "$dir/summary.txt" 2>/dev/null))"
  [ "$(head -n 1 "$dir/steps.tsv")" = "$(printf 'step\tstatus\trc\tseconds\testimate\tlimit\trerun')" ] \
    || fail "$what: steps.tsv has no header"
  awk -F'\t' 'NR > 1 && (NF != 7 || $2 !~ /^(passed|failed|cut|deferred)$/) {exit 1}' "$dir/steps.tsv" \
    || fail "$what: a malformed row in steps.tsv: $(cat "$dir/steps.tsv")"
  python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip()]' "$dir/results.jsonl" \
    || fail "$what: results.jsonl does not parse"
  [ ! -f "$dir/gpu-check.tar.gz" ] || gzip -t "$dir/gpu-check.tar.gz" || fail "$what: a damaged archive"
}

# The dry run passes on the archive and leaves its files.
"$root/scripts/gpu-check.sh" --dry-run "$work/bundle.tar.xz" "$work/out" >"$work/dry.log" 2>&1 \
  || { cat "$work/dry.log"; fail "the dry run failed"; }
check_out "$work/out" "the dry run"
[ "$(ls "$work/out" | sort | tr '\n' ' ')" = "gpu-check.tar.gz profile.json results.jsonl steps.tsv summary.txt tails.txt " ] \
  || fail "OUT holds $(ls "$work/out")"
lines=$(wc -l <"$work/out/summary.txt")
[ "$lines" -le 50 ] || fail "the summary has $lines lines"
grep -q "steps: all .* run passed" "$work/out/summary.txt" || { cat "$work/out/summary.txt"; fail "summary does not pass"; }
awk -F'\t' 'NR > 1 && $2 != "passed" {exit 1}' "$work/out/steps.tsv" || fail "a step of the dry run did not pass"
# (listed into a file first: grep -q ending a pipe early would fail tar with SIGPIPE under pipefail)
tar -tzf "$work/out/gpu-check.tar.gz" >"$work/archive.list"
grep -q 'logs/steps.tsv' "$work/archive.list" || fail "the archive lacks logs/steps.tsv"
grep -q '^== trainer passed 0 ' "$work/out/tails.txt" || fail "tails.txt lacks the trainer step's tail"
grep -q '"check_step": "trainer"' "$work/out/results.jsonl" || fail "results.jsonl lacks the trainer's figures"
grep -q "rerun bitwise yes, resume bitwise yes" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the trainer step did not rerun and resume bit for bit"; }
grep -Eq "against model.attention=native train.recompute=none: losses within [0-9.e+-]+ \(ok\)" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the trainer step's comparison run is missing"; }
# Several ranks through odc-run --local over the IPC transport (shared memory here, CUDA IPC on
# the GPU), and the bandwidth bench under the same launcher.
grep -Eq "^rl \(online GRPO loop\): 3 iterations, 6 steps, reward .*rerun bitwise yes, resume bitwise yes" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the rl step did not rerun and resume the online loop bit for bit"; }
grep -Eq "^rollout tok/s .*8: [0-9]+ \([0-9.]+x per-sequence\)" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "no rollout throughput figures"; }
grep -q "ipc training ok" "$work/out/summary.txt" && grep -q "bf16 gathers equal fp32 gathers bitwise: yes" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the ipc-train step did not give the 1-rank losses and bitwise bf16 gathers"; }
# Sequences over the cap split over 2 and 4 processes (ODC), each within the tolerance of one
# unsplit process; the collective's static groups are named as not run (no MPI under odc-run --local).
grep -Eq "^context parallelism ok \(tolerance 0.02 of 1 unsplit rank, longest [0-9]+ tok\): odc x2 cap [0-9]+ max diff .*; odc x4 cap [0-9]+ max diff" \
  "$work/out/summary.txt" && grep -q "^  not run: collective x2, collective x4" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "the context step did not give the unsplit run's losses on 2 and 4 ranks"; }
grep -Eq "^comm ipc x2 .*gather [0-9]+ GB/s" "$work/out/summary.txt" || { cat "$work/out/summary.txt"; fail "no comm-bandwidth figures"; }
grep -Eq "^profile \(.*\): step [0-9.]+ ms, ops [0-9.]+ ms" "$work/out/summary.txt" \
  || { cat "$work/out/summary.txt"; fail "no profile in the summary"; }

# The plan of the GPU run comes first, riskiest first, with each step's expected seconds.
grep -q "gpu-check plan of the GPU run" "$work/dry.log" && grep -Eq "^  long-context +[0-9]+ +[0-9]+ +[0-9]+ " "$work/dry.log" \
  && grep -Eq "first call: [0-9]+ steps in about [0-9]+s of 450s" "$work/dry.log" || { cat "$work/dry.log"; fail "no plan printed"; }
order="$(awk '/^  [a-z-]+ +[0-9]+ +[0-9]+ +[0-9]+ / {print $1}' "$work/dry.log" | paste -sd, -)"
[ "$order" = "trainer,rl,rollout,ipc-train,context,tests,comm-bandwidth,model-parity,throughput,long-context,attention,profile,throughput-torch,long-context-torch,attention-torch,nccl,ceilings,memcheck,racecheck,synccheck" ] \
  || fail "the plan's order is $order"
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
# gpu_attention --runtime-info names the CUDA runtime cuDNN's frontend loads (without a device: 77).
grep -q "^gpu_attention --runtime-info rc=" "$work/archive/logs/env.log" || fail "env.log lacks gpu_attention --runtime-info"

# A deadline that leaves no time after the bundle's own steps defers every other step: exit 3 (none
# failed), each named with the --only that runs it.
set +e
"$root/scripts/gpu-check.sh" --dry-run --deadline 16 "$work/bundle.tar.xz" "$work/out3" >"$work/dry3.log" 2>&1; rc=$?
set -e
[ "$rc" -eq 3 ] || { cat "$work/dry3.log"; fail "a check with deferred steps exited $rc, not 3"; }
check_out "$work/out3" "the deferring run"
grep -q "steps: all 3 run passed in .*; not run (deadline): start-gpu_ceilings," "$work/out3/summary.txt" \
  || { cat "$work/out3/summary.txt"; fail "the deferred steps are not named"; }
grep -q "  rerun: --only start-gpu_ceilings," "$work/out3/summary.txt" || fail "the summary gives no --only for them"
grep -q "gpu-check: to rerun what did not pass: scripts/gpu-check.sh --only start-gpu_ceilings," "$work/dry3.log" \
  || fail "no --only printed last"

# A step killed by the deadline's limit is cut, not failed: the trainer, made 60 s slow, starts
# (its 2 x 6 s fit) under a 40 s deadline and is killed at what is left of it; exit 3.
set +e
ODC_CHECK_SIMULATE_SLOW=trainer=60 "$root/scripts/gpu-check.sh" --dry-run --deadline 40 --only trainer "$b" \
  "$work/out4" >"$work/dry4.log" 2>&1; rc=$?
set -e
[ "$rc" -eq 3 ] || { cat "$work/dry4.log"; fail "a check whose step was cut exited $rc, not 3"; }
check_out "$work/out4" "the cut run"
awk -F'\t' '$1 == "trainer" && $2 == "cut" && ($3 == 124 || $3 == 137) && $7 == "--only trainer" {found = 1} END {exit !found}' \
  "$work/out4/steps.tsv" || fail "the slow trainer is not reported as cut: $(cat "$work/out4/steps.tsv")"
grep -q "steps: all 3 run passed in .*; cut by the deadline: trainer" "$work/out4/summary.txt" \
  || { cat "$work/out4/summary.txt"; fail "the summary does not say the trainer was cut"; }

# Killed with SIGKILL at three random moments of a dry run (nothing runs after the kill): OUT
# still holds what the steps that finished left, readable. The moments fall in the first 20 s,
# where the bundle's own steps, the program starts and the trainer's runs are.
for i in 1 2 3; do
  moment=$((RANDOM % 18 + 2))
  setsid "$root/scripts/gpu-check.sh" --dry-run "$b" "$work/kill$i" >"$work/kill$i.log" 2>&1 &
  pid=$!
  sleep "$moment"
  pkill -KILL -s "$pid" 2>/dev/null || true  # the session: timeout runs each step in a group of its own
  wait "$pid" 2>/dev/null || true
  check_out "$work/kill$i" "killed at ${moment}s"
  rows=$(($(wc -l <"$work/kill$i/steps.tsv") - 1))
  echo "test_gpu_bundle: killed at ${moment}s: $rows steps recorded, $(head -n 2 "$work/kill$i/summary.txt" | tail -n 1)"
done

# Sizing the calls from the device time left (docs/GPU_CHECK.md): a first call keeps room for a
# rerun, a rerun takes the rest, and too little time is refused.
[ "$("$root/scripts/gpu-check.sh" --size 900)" = "--deadline 450 timeout_s 480" ] || fail "--size 900"
[ "$("$root/scripts/gpu-check.sh" --size 320 --rerun)" = "--deadline 140 timeout_s 170" ] || fail "--size 320 --rerun"
if "$root/scripts/gpu-check.sh" --size 200 --rerun >/dev/null 2>&1; then fail "--size 200 --rerun was not refused"; fi

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

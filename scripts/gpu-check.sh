#!/usr/bin/env bash
# The one prepared check for a lent GPU machine, run from the bundle that scripts/gpu-bundle.sh
# made here (that machine cannot build this project: it lacks MPI, UCX, yaml-cpp, ICU, ...).
#
#   scripts/gpu-check.sh [--dry-run] [--deadline S | --budget S [--rerun]] [--only STEPS] BUNDLE OUT_DIR
#   scripts/gpu-check.sh --size BUDGET [--rerun]
#
#   BUNDLE      gpu-bundle/odc-gpu-bundle.tar.xz (or an unpacked odc-gpu/ folder)
#   OUT_DIR     what comes back, kept current after EVERY step (a call cut at any moment leaves
#               the steps that finished), at most 7 files: summary.txt (also printed last, at most
#               50 lines), steps.tsv (one row per step: status passed|failed|cut|deferred, exit
#               code, seconds, estimate, limit, the --only that reruns it), tails.txt (the plan,
#               then each finished step's last log lines), results.jsonl (each finished step's JSON
#               lines, tagged with "check_step"), profile.json (the profile step's), current.log
#               (the output of the step in progress; gone when it ends) and gpu-check.tar.gz (every
#               log so far)
#   --deadline  seconds for the whole check (default 450: the first call of 15 minutes). A step
#               starts only when min(its limit, twice its estimate) is left; it runs with its limit
#               cut to what is left; one that does not fit is deferred, one killed by a cut limit
#               is "cut" (neither is failed) and both are named with the --only that reruns them.
#   --budget    the device seconds left (the device tool's status: budget_left_s) before this
#               call: the deadline is sized from it as --size prints (with --rerun: the last call)
#   --size      prints the --deadline and the timeout_s to pass for a call with BUDGET device
#               seconds left (docs/GPU_CHECK.md, "Sizing the calls"), needs no bundle
#   --only      a comma-separated list of step names to run, e.g. the failed, cut or deferred
#               steps of an earlier call: "--only ipc-train,throughput"; manifest, libraries and
#               env always run
#   --dry-run   everything except the GPU work, on any machine: prints the GPU run's plan,
#               unpacks and verifies the bundle, resolves every program's libraries and starts
#               each one, runs the trainer, rl, ipc, context and profile steps on the CPU
#               backend's bf16 mode at tiny shapes, plans the long-context cases' memory, compiles
#               the Python peers, and writes OUT_DIR the same way (tested in CI)
#
# Steps, riskiest first (code that has never run on a GPU before what has): trainer (odc-train:
# cuDNN attention, selective recomputation, kept weight copies; rerun and resume bit for bit, and
# against the native kernels), rl (the online GRPO loop on the device), rollout (batched decode
# throughput), ipc-train (1/2/4 processes over CUDA IPC), context (sequences over the cap split over
# 2 and 4 processes, against one unsplit), tests (odc_cuda_tests), comm-bandwidth,
# model-parity, throughput, long-context, attention, profile (per-op device time of a 1B step),
# then the torch peers (throughput-torch, long-context-torch, attention-torch), nccl, ceilings and
# the sanitizers (memcheck, racecheck, synccheck).
#
# Switches (environment; docs/GPU_CHECK.md): ODC_CHECK_SET ("key=value ..." appended as --set to
# every odc-train run), ODC_CHECK_ATTENTION (model benches' attention: auto|native|cudnn),
# ODC_CHECK_ATTENTION_IMPLS (gpu_attention --impl, default native,cudnn), ODC_CHECK_RECOMPUTE
# (long-context, default selective), ODC_CHECK_LONG_TOKENS (default 32768,65536),
# ODC_CHECK_TORCH_SDPA (the torch long-context peer's SDPA backend, default auto),
# ODC_CHECK_TESTS (a Catch2 test spec for odc_cuda_tests, e.g. "~[cudnn]"); passed through to the
# programs: CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT, CUDNN_FRONTEND_CUDART_LIB_NAME,
# ODC_CUDNN_LIBRARY. ODC_CHECK_SIMULATE_SLOW="STEP=SECONDS" (dry run only) makes that step sleep
# first: how CI proves that a step cut by the deadline is reported as cut.
#
# Exit: 0 when every step ran and passed; 1 when one failed; 3 when none failed but some were
# deferred or cut; 2 on a usage error.
set -uo pipefail
dry_run=0
deadline=450
budget=""
rerun=0
size=""
only=""
usage() {
  echo "usage: scripts/gpu-check.sh [--dry-run] [--deadline S | --budget S [--rerun]] [--only STEPS] BUNDLE OUT_DIR" >&2
  echo "       scripts/gpu-check.sh --size BUDGET [--rerun]" >&2
  exit 2
}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --deadline) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; deadline="$2"; shift 2 ;;
    --budget) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; budget="$2"; shift 2 ;;
    --size) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; size="$2"; shift 2 ;;
    --rerun) rerun=1; shift ;;
    --only) [ $# -ge 2 ] && [[ "$2" =~ ^[a-z0-9_,-]+$ ]] || usage; only=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,54p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1'" >&2; usage ;;
    *) args+=("$1"); shift ;;
  esac
done

# ---- sizing a call from the device time left (docs/GPU_CHECK.md, "Sizing the calls") ----
# A lent machine's start costs up to about 120 s of device time and it is held 30 s after a call.
# A first call takes 60% of what is left after one start and release, keeping the rest for one
# rerun (which may need a fresh start); the rerun takes everything after a start and release.
# The caller's timeout_s is the deadline plus 30 s: the check ends itself inside it.
size_call() {  # BUDGET RERUN -> "DEADLINE TIMEOUT"
  local b=$1 r=$2 d
  if [ "$r" -eq 1 ]; then d=$((b - 180)); else d=$(((b - 150) * 6 / 10)); fi
  [ "$d" -gt 540 ] && d=540
  if [ "$d" -lt 60 ]; then echo "0 0"; else echo "$d $((d + 30))"; fi
}
if [ -n "$size" ]; then
  [ ${#args[@]} -eq 0 ] || usage
  read -r d t <<<"$(size_call "$size" "$rerun")"
  if [ "$d" -eq 0 ]; then
    echo "gpu-check: $size s of device time leave no room for a$([ "$rerun" -eq 1 ] && echo ' rerun' || echo ' call') (a start, 60 s of checks and the release)" >&2
    exit 1
  fi
  echo "--deadline $d timeout_s $t"
  exit 0
fi
[ ${#args[@]} -eq 2 ] || usage
if [ -n "$budget" ]; then
  read -r deadline _ <<<"$(size_call "$budget" "$rerun")"
  [ "$deadline" -gt 0 ] || { echo "gpu-check: error: --budget $budget leaves no room for a call" >&2; exit 2; }
fi
bundle="${args[0]}"
out="${args[1]}"
start_s=$SECONDS
reserve=15  # seconds kept for the summary and the archive

# ---- switches (docs/GPU_CHECK.md, "Switches") ----
read -r -a check_sets <<<"${ODC_CHECK_SET:-}"
set_args=()
for kv in "${check_sets[@]+"${check_sets[@]}"}"; do
  [[ "$kv" == *=* ]] || { echo "gpu-check: error: ODC_CHECK_SET entry '$kv' is not key=value (e.g. ODC_CHECK_SET=\"model.attention=native\")" >&2; exit 2; }
  set_args+=(--set "$kv")
done
attention="${ODC_CHECK_ATTENTION:-auto}"
attention_impls="${ODC_CHECK_ATTENTION_IMPLS:-native,cudnn}"
recompute="${ODC_CHECK_RECOMPUTE:-selective}"
long_tokens="${ODC_CHECK_LONG_TOKENS:-32768,65536}"
torch_sdpa="${ODC_CHECK_TORCH_SDPA:-auto}"
tests_spec="${ODC_CHECK_TESTS:-}"
slow="${ODC_CHECK_SIMULATE_SLOW:-}"
[[ "$attention" =~ ^(auto|native|cudnn)$ ]] || { echo "gpu-check: error: ODC_CHECK_ATTENTION='$attention': expected auto, native or cudnn" >&2; exit 2; }
[[ "$attention_impls" =~ ^(native|cudnn)(,(native|cudnn))*$ ]] || { echo "gpu-check: error: ODC_CHECK_ATTENTION_IMPLS='$attention_impls': expected native, cudnn or native,cudnn" >&2; exit 2; }
[[ "$recompute" =~ ^(none|selective|full)$ ]] || { echo "gpu-check: error: ODC_CHECK_RECOMPUTE='$recompute': expected none, selective or full" >&2; exit 2; }
[[ "$long_tokens" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "gpu-check: error: ODC_CHECK_LONG_TOKENS='$long_tokens': expected comma-separated token counts, e.g. 32768,65536" >&2; exit 2; }
[[ "$torch_sdpa" =~ ^(auto|flash|cudnn|efficient|math)$ ]] || { echo "gpu-check: error: ODC_CHECK_TORCH_SDPA='$torch_sdpa': expected auto, flash, cudnn, efficient or math" >&2; exit 2; }
[ -z "$slow" ] || [[ "$dry_run" -eq 1 && "$slow" =~ ^[a-z-]+=[0-9]+$ ]] \
  || { echo "gpu-check: error: ODC_CHECK_SIMULATE_SLOW='$slow': STEP=SECONDS, with --dry-run only" >&2; exit 2; }
# The torch peer has no selective recomputation: it checkpoints whole layers whenever ours recomputes.
torch_recompute=full
[ "$recompute" = none ] && torch_recompute=none

# ---- the plan: name, expected seconds on a GPU, limit seconds, expected seconds of the dry run, what ----
# The H200 runs of 2026-12-04 recorded only the whole check's time (17 steps, before cuDNN and
# long-context: 147-151 s); the steps below are that total split, plus estimates of what changed:
# the trainer now runs five odc-train processes with cuDNN graph builds, rl four plus the reference
# scoring, tests 25 more cases ([cudnn] with ~18 graph builds, the policy and decode kernels). The
# next run's steps.tsv (seconds per step) replaces them.
plan=(
  "trainer 25 120 6 odc-train: cuDNN, recompute, kept copies; rerun, resume, vs native"
  "rl 15 90 6 the online GRPO loop on the GPU, rerun and resume bit for bit"
  "rollout 20 60 4 sample_rollouts tok/s at 8, 64, 256 sequences, batched vs per-sequence"
  "ipc-train 25 120 6 1, 2, 4 processes over CUDA IPC"
  "context 20 90 12 sequences over the cap split over 2 and 4 processes, vs 1 unsplit"
  "tests 45 150 3 odc_cuda_tests, one pass ([cudnn] included)"
  "comm-bandwidth 10 45 3 IPC gather / scatter-accumulate"
  "model-parity 5 30 3 GPU bf16 vs CPU bf16 vs fp32"
  "throughput 15 45 3 1B shape, ours"
  "long-context 45 90 4 Qwen2-1.5B, one sequence of each of ${long_tokens} tokens, recompute ${recompute}"
  "attention 30 60 3 native and cuDNN (${attention_impls}), cuDNN graph builds"
  "profile 15 60 4 per-op device time of one 1B step (8x1024 tokens)"
  "throughput-torch 15 60 2 1B shape, torch eager"
  "long-context-torch 30 75 2 the same, torch SDPA (${torch_sdpa}) + checkpoint"
  "attention-torch 15 40 2 torch SDPA flash / cuDNN / varlen"
  "nccl 3 20 2 NCCL on one rank"
  "ceilings 3 30 2 cuBLASLt 8192^3, device copy"
  "memcheck 12 45 2 compute-sanitizer [sanitize]"
  "racecheck 10 45 2 compute-sanitizer [sanitize]"
  "synccheck 6 45 2 compute-sanitizer [sanitize]"
)
declare -A expected=() limit_of=()
for row in "${plan[@]}"; do
  read -r name exp lim dry_exp _ <<<"$row"
  if [ "$dry_run" -eq 1 ]; then expected[$name]=$dry_exp; else expected[$name]=$exp; fi
  limit_of[$name]=$lim
done
selected() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
need_of() {  # a step starts only when min(limit, 2 x estimate) is left
  local e=$((2 * ${expected[$1]:-5})) l=${limit_of[$1]:-60}
  [ "$e" -lt "$l" ] && echo "$e" || echo "$l"
}
print_plan() {
  local total=8 first=8 fits=() deferred=() row name exp lim what
  printf 'gpu-check plan%s: deadline %ss (%ss kept for the summary); a step starts when min(limit, 2 x est.) is left\n' \
    "$([ "$dry_run" -eq 1 ] && echo ' of the GPU run (this dry run does the CPU steps instead)')" "$deadline" "$reserve"
  printf '  %-20s %5s %5s %6s  %s\n' step est.s limit cumul. what
  printf '  %-20s %5s %5s %6s  %s\n' "manifest+env" 8 90 8 "bundle manifest, libraries, nvidia-smi, torch, cuDNN's runtime"
  for row in "${plan[@]}"; do
    read -r name exp lim _ what <<<"$row"
    selected "$name" || continue
    total=$((total + exp))
    # As step() decides, with every earlier step taking its estimate.
    local need=$((2 * exp < lim ? 2 * exp : lim))
    if [ $((first + need)) -le $((deadline - reserve)) ]; then
      fits+=("$name")
      first=$((first + exp))
    else
      deferred+=("$name")
    fi
    printf '  %-20s %5s %5s %6s  %s\n' "$name" "$exp" "$lim" "$total" "$what"
  done
  printf '  first call: %s steps in about %ss of %ss' "$((${#fits[@]} + 3))" "$first" "$deadline"
  if [ ${#deferred[@]} -gt 0 ]; then
    local list
    list="$(IFS=,; echo "${deferred[*]}")"
    printf '; expected deferred: %s (then: --only %s)\n' "$list" "$list"
  else
    printf '; nothing expected deferred (all %ss)\n' "$total"
  fi
}
plan_text="$(print_plan)"
echo "$plan_text" >&2
if [ -n "$only" ]; then  # a misspelt name would run nothing and pass: say so
  IFS=, read -r -a wanted <<<"${only//,,/,}"
  for name in "${wanted[@]}"; do
    [ -z "$name" ] || [ -n "${expected[$name]:-}" ] || [[ "$name" =~ ^(start-.*|python-peers)$ ]] \
      || echo "gpu-check: warning: --only names no step '$name' (steps: ${!expected[*]})" >&2
  done
fi

# ---- OUT_DIR, kept current (publish after every step) ----
mkdir -p "$out" || { echo "gpu-check: error: cannot create $out" >&2; exit 1; }
out="$(cd "$out" && pwd)"
rm -f "$out"/{summary.txt,steps.tsv,tails.txt,results.jsonl,profile.json,current.log,gpu-check.tar.gz} "$out"/.*.part
work="$(mktemp -d "${TMPDIR:-/tmp}/odc-gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs"
echo "$plan_text" >"$logs/plan.txt"
status_file="$logs/steps.tsv"
printf 'step\tstatus\trc\tseconds\testimate\tlimit\trerun\n' >"$status_file"
{ echo "$plan_text"; echo; } >"$logs/tails.txt"
: >"$logs/results.jsonl"
printf 'ODC GPU check%s: started, no step finished yet (plan in tails.txt)\n' \
  "$([ "$dry_run" -eq 1 ] && echo ' (dry run: no GPU work)')" >"$logs/summary.txt"
for f in steps.tsv tails.txt results.jsonl summary.txt; do cp "$logs/$f" "$out/$f"; done
failed=0
incomplete=0
b=""
step_pid=""
{
  echo "ODC_CHECK_SET=${ODC_CHECK_SET:-}"
  echo "ODC_CHECK_ATTENTION=$attention"
  echo "ODC_CHECK_ATTENTION_IMPLS=$attention_impls"
  echo "ODC_CHECK_RECOMPUTE=$recompute"
  echo "ODC_CHECK_LONG_TOKENS=$long_tokens"
  echo "ODC_CHECK_TORCH_SDPA=$torch_sdpa"
  echo "ODC_CHECK_TESTS=$tests_spec"
  echo "CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT=${CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT:-}"
  echo "CUDNN_FRONTEND_CUDART_LIB_NAME=${CUDNN_FRONTEND_CUDART_LIB_NAME:-}"
  echo "ODC_CUDNN_LIBRARY=${ODC_CUDNN_LIBRARY:-}"
} >"$logs/switches.txt"

# Writes what a cut call must leave: steps.tsv, the summary, the step's tail and JSON lines, the
# archive. They are kept in logs/ and every file of OUT is replaced by a rename (a kill leaves the
# old or the new, never half of one).
put() {  # FILE NAME: logs/FILE -> OUT/NAME
  cp "$1" "$out/.$2.part" && mv -f "$out/.$2.part" "$out/$2"
}
publish() {  # [STEP]
  local name=${1:-}
  if [ -n "$name" ]; then
    { printf '== %s\n' "$(tail -n 1 "$status_file" | cut -f1-4 | tr '\t' ' ')"
      tail -n 30 "$logs/$name.log" 2>/dev/null; echo; } >>"$logs/tails.txt"
    if [ -f "$logs/$name.jsonl" ]; then
      python3 -c 'import json,sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"): continue
    try: row = json.loads(line)
    except ValueError: continue
    print(json.dumps({"check_step": sys.argv[2], **row}))' "$logs/$name.jsonl" "$name" >>"$logs/results.jsonl" 2>/dev/null
    fi
  fi
  put "$status_file" steps.tsv
  put "$logs/tails.txt" tails.txt
  put "$logs/results.jsonl" results.jsonl
  if [ -n "$b" ] && [ -f "$b/py/gpu_check_summary.py" ]; then
    if timeout 30 python3 "$b/py/gpu_check_summary.py" "$logs" "$dry_run" >"$logs/summary.txt" 2>>"$logs/summary-errors.log"; then
      put "$logs/summary.txt" summary.txt
    else
      { echo "ODC GPU check: the summary failed (logs/summary-errors.log); steps:"; cat "$status_file"; } >"$logs/summary.txt"
      put "$logs/summary.txt" summary.txt
    fi
  fi
  tar -C "$work" -czf "$out/.gpu-check.tar.gz.part" logs 2>/dev/null && mv -f "$out/.gpu-check.tar.gz.part" "$out/gpu-check.tar.gz"
}

# step NAME LIMIT CMD...: runs CMD (its output in OUT/current.log while it runs, then
# logs/NAME.log) with LIMIT cut to what is left of the deadline, records the row and publishes.
step() {
  local name=$1 limit=$2
  shift 2
  local always=0
  case "$name" in
    manifest|libraries|env) always=1 ;;
    *) selected "$name" || return 0 ;;
  esac
  local left=$((deadline - (SECONDS - start_s) - reserve)) need rc took status run_limit=$limit t0=$SECONDS
  local est=${expected[$name]:-0}
  need=$(need_of "$name")
  if [ "$always" -eq 0 ] && [ "$left" -lt "$need" ]; then
    printf '%s\tdeferred\t-\t0\t%s\t%s\t--only %s\n' "$name" "$est" "$limit" "$name" >>"$status_file"
    incomplete=1
    echo "gpu-check: $name deferred (needs ${need}s, ${left}s left)" >&2
    publish
    return 1
  fi
  local cut_limit=0
  if [ "$always" -eq 0 ] && [ "$limit" -gt "$left" ]; then run_limit=$left; cut_limit=1; fi
  echo "== $name (limit ${run_limit}s of its ${limit}s, started at +$((SECONDS - start_s))s): $*" >"$out/current.log"
  # In the background, so that a caller's SIGTERM reaches on_term at once (bash runs a trap only
  # between commands, and `wait` is one it interrupts).
  if [ -n "$slow" ] && [ "${slow%%=*}" = "$name" ]; then
    timeout --kill-after=5 "$run_limit" bash -c 'sleep "$1" && shift && exec "$@"' slow "${slow#*=}" "$@" >>"$out/current.log" 2>&1 &
  else
    timeout --kill-after=5 "$run_limit" "$@" >>"$out/current.log" 2>&1 &
  fi
  step_pid=$!
  wait "$step_pid"
  rc=$?
  step_pid=
  took=$((SECONDS - t0))
  cat "$out/current.log" >>"$logs/$name.log"
  rm -f "$out/current.log"
  local rerun_hint=-
  if [ "$rc" -eq 0 ]; then
    status=passed
  elif [ "$cut_limit" -eq 1 ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
    status=cut  # the deadline's limit, not the step's own: no verdict on it
    rerun_hint="--only $name"
    incomplete=1
  else
    status=failed  # (rc 124/137 at its own limit: a hang)
    rerun_hint="--only $name"
    failed=1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$took" "$est" "$run_limit" "$rerun_hint" >>"$status_file"
  echo "gpu-check: $name $status rc=$rc ${took}s" >&2
  publish "$name"
  [ "$rc" -eq 0 ]
}
lim() { echo "${limit_of[$1]}"; }

finish() {
  publish
  cat "$out/summary.txt"
  local again
  again="$(awk -F'\t' 'NR > 1 && ($2 == "deferred" || $2 == "cut" || $2 == "failed") {print $1}' "$status_file" | paste -sd, -)"
  [ -n "$again" ] && echo "gpu-check: to rerun what did not pass: scripts/gpu-check.sh --only $again BUNDLE OUT" >&2
  [ "$failed" -ne 0 ] && exit 1
  [ "$incomplete" -ne 0 ] && exit 3
  exit 0
}
# A caller's kill (SIGTERM, e.g. the device tool's limit): the step in progress is cut; OUT is
# published once more. (SIGKILL leaves what the last publish wrote.)
on_term() {
  trap - TERM INT
  [ -n "$step_pid" ] && kill -TERM "$step_pid" 2>/dev/null
  if [ -f "$out/current.log" ]; then
    local name
    name="$(head -n 1 "$out/current.log" | awk '{print $2}')"
    cat "$out/current.log" >>"$logs/$name.log" 2>/dev/null
    printf '%s\tcut\tterm\t-\t%s\t-\t--only %s\n' "$name" "${expected[$name]:-0}" "$name" >>"$status_file"
    rm -f "$out/current.log"
    publish "$name"
  else
    publish
  fi
  exit 3
}
trap on_term TERM INT

# ---- the bundle ----
if [ -d "$bundle" ]; then
  b="$(cd "$bundle" && pwd)"
else
  [ -f "$bundle" ] || { echo "gpu-check: error: no bundle at '$bundle' (make one with scripts/gpu-bundle.sh)" >&2; exit 1; }
  tar -C "$work" -xJf "$bundle" || { echo "gpu-check: error: '$bundle' is not a readable .tar.xz bundle" >&2; exit 1; }
  b="$work/odc-gpu"
fi
[ -f "$b/MANIFEST.sha256" ] || { echo "gpu-check: error: $b has no MANIFEST.sha256: not a gpu-bundle.sh bundle" >&2; exit 1; }
cp "$b/COMMIT" "$b/BUNDLE.json" "$logs/" 2>/dev/null
step manifest 30 bash -c 'cd "$1" && sha256sum --quiet -c MANIFEST.sha256' manifest "$b" || finish

# CUDA's libraries come from this machine: the toolkit, else PyTorch's nvidia-* wheels (cuDNN).
cuda_libs="$(python3 - 2>/dev/null <<'PY'
import glob, os
dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"]
try:
    import nvidia
    for root in nvidia.__path__:
        dirs += sorted(glob.glob(os.path.join(root, "*", "lib")))
except Exception:
    pass
print(":".join(d for d in dirs if os.path.isdir(d)))
PY
)"
# The bundle's libraries (Debian's libstdc++, ...) and CUDA's come first for the bundle's programs
# only: each program is started through a wrapper in $work/bin that sets its library path and
# execs it; nothing else (python3 and torch, nvidia-smi, the summary) sees that path.
bundle_ld="$b/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bundle_env=(env "LD_LIBRARY_PATH=$bundle_ld")
bin="$work/bin"
mkdir -p "$bin"
for p in "$b"/bin/*; do
  printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\nexec %q "$@"\n' "$bundle_ld" "$p" >"$bin/${p##*/}"
  chmod +x "$bin/${p##*/}"
done
step libraries 30 "${bundle_env[@]}" bash -c 'for p in "$1"/*; do if ldd "$p" | grep "not found"; then echo "$p: unresolved"; exit 1; fi; done; echo all resolved' \
  libraries "$b/bin" || finish

# nvidia-smi and python3 with this machine's environment (the log shows the library path they
# see); the CUDA runtime the cuDNN frontend will load in our programs (pinned by them).
step env 30 bash -c 'nvidia-smi || echo "nvidia-smi: none"; echo "machine LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}";
  python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.is_available(), \"cudnn\", torch.backends.cudnn.version())" || echo "torch: none"
  "$3/gpu_attention" --runtime-info; echo "gpu_attention --runtime-info rc=$?"
  cat "$1/COMMIT" "$2"' env "$b" "$logs/switches.txt" "$bin"

# The shape and switches the dry run puts on the CPU backend's bf16 mode instead of the GPU.
tiny=(--set model.device=cpu --set model.config.hidden_size=128 --set model.config.intermediate_size=256
      --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=2
      --set model.config.num_key_value_heads=1)
long_args=(--shape qwen2-1.5b --tokens "$long_tokens" --recompute "$recompute" --attention "$attention")
train_cmd() {  # the trainer step: cuDNN + selective recomputation, bit for bit, then against native + none
  step trainer "$(lim trainer)" bash -c 'python3 "$1/py/gpu_check_train.py" "$2/odc-train" "$1/configs/gpu-check-train.yaml" \
    "$1/data/gpu-train.jsonl" "$3/train" --compare-set model.attention=native --compare-set train.recompute=none \
    "${@:5}" >"$4"' trainer "$b" "$bin" "$work" "$logs/trainer.jsonl" "$@"
}
rl_cmd() {
  step rl "$(lim rl)" bash -c 'python3 "$1/py/gpu_check_train.py" "$2/odc-train" "$1/configs/gpu-check-rl.yaml" - \
    "$3/rl" --steps 6 --name gpu_check_rl --set "rl.prompts=$1/data/rl-prompts.jsonl" \
    --set "data.tokenizer=$1/data/tokenizer/tokenizer.json" "${@:5}" >"$4"' rl "$b" "$bin" "$work" "$logs/rl.jsonl" "$@"
}
ipc_cmd() {
  step ipc-train "$(lim ipc-train)" bash -c 'python3 "$1/py/gpu_check_ipc.py" "$2/odc-run" "$2/odc-train" \
    "$1/configs/gpu-check-ipc.yaml" "$1/data/gpu-train.jsonl" "$3/ipc" "${@:5}" >"$4"' ipc-train "$b" "$bin" "$work" \
    "$logs/ipc-train.jsonl" "$@"
}
# Context parallelism (scripts/gpu_check_context.py): the bundle's SFT data, whose longest sequence
# fixes the caps (the longest needs 2, then 4 ranks); the collective's static groups only where
# every rank has a GPU of its own (NCCL refuses ranks sharing one): --gpus says how many there are.
context_cmd() {
  step context "$(lim context)" bash -c 'python3 "$1/py/gpu_check_context.py" "$2/odc-run" "$2/odc-train" \
    "$1/configs/gpu-check-context.yaml" "$1/data/gpu-train.jsonl" "$3/context" "${@:5}" >"$4"' context "$b" "$bin" "$work" \
    "$logs/context.jsonl" "$@"
}
if [ "$dry_run" -eq 1 ]; then
  # Each program starts with the bundle's libraries: without a device it exits 77 (SKIP) or, asked
  # for --help, 0.
  for p in gpu_ceilings gpu_nccl gpu_gemm gpu_attention gpu_model_parity gpu_model_throughput odc_cuda_tests; do
    expected[start-$p]=1
    step "start-$p" 20 bash -c '"$1"; rc=$?; [ $rc -eq 77 ] || [ $rc -eq 0 ]' start "$bin/$p"
  done
  # (These run on the CPU too: started for their usage only.)
  for p in odc-train rollout_throughput; do
    expected[start-$p]=1
    step "start-$p" 20 "$bin/$p" --help
  done
  train_cmd "${tiny[@]}" --set model.attention=auto --set data.minibatch_size=4 --set train.steps=4 \
    "${set_args[@]+"${set_args[@]}"}"
  rl_cmd "${tiny[@]}" "${set_args[@]+"${set_args[@]}"}"
  step rollout "$(lim rollout)" bash -c '"$1/rollout_throughput" --device cpu --concurrency 8,64 --new-tokens 4 >"$2"' \
    rollout "$bin" "$logs/rollout.jsonl"
  # Several ranks without MPI (odc-run --local), ODC over the IPC transport: here host shared
  # memory, on the GPU CUDA IPC; and the comms' bandwidth bench, tiny.
  ipc_cmd --ranks 1,2 "${tiny[@]}" --set train.steps=4 --set train.threads=1 "${set_args[@]+"${set_args[@]}"}"
  # (No collective here: on the CPU it runs over MPI, which odc-run --local does not start.)
  context_cmd --ranks 2,4 --gpus 0 "${tiny[@]}" --set train.steps=4 --set train.threads=1 \
    "${set_args[@]+"${set_args[@]}"}"
  step comm-bandwidth "$(lim comm-bandwidth)" bash -c '"$1/odc-run" --local 2 "$1/comm_bandwidth" --device cpu --unit-mib 1 \
    --units 2 --reps 1 --comms ipc,ipc-bf16 >"$2"' comm-bandwidth "$bin" "$logs/comm-bandwidth.jsonl"
  # The long-context step's cases as the GPU run gives them: their memory plans (a 139.8 GiB
  # H200), and the same arguments on a tiny CPU shape (the program's whole path, not its speed).
  step long-context "$(lim long-context)" bash -c '"$1/gpu_model_throughput" "${@:4}" --plan-only --device-gib 139.8 >"$2" &&
    "$1/gpu_model_throughput" --cpu-tiny --shape qwen2-1.5b --tokens 256,512 --recompute "$3" --steps 2 --warmup 1' \
    long-context "$bin" "$logs/long-context.jsonl" "$recompute" "${long_args[@]}"
  step profile "$(lim profile)" bash -c '"$1/gpu_model_throughput" --cpu-tiny --layers 2 --seqs 2 --seq-len 128 --steps 2 \
    --warmup 1 --profile "$3" >"$2" &&
    cp "$3" "$4"' profile "$bin" "$logs/profile.jsonl" "$logs/profile.json" "$out/profile.json"
  expected[python-peers]=1
  step python-peers 30 python3 -m py_compile "$b"/py/*.py
  finish
fi

# In the plan's order: what has never run on a GPU first, so that the deadline defers the rest.
train_cmd "${set_args[@]+"${set_args[@]}"}"
rl_cmd "${set_args[@]+"${set_args[@]}"}"
step rollout "$(lim rollout)" bash -c '"$1/rollout_throughput" --device cuda --shape llama-1b --concurrency 8,64,256 \
  --new-tokens 16 --temperature 0 >"$2"' \
  rollout "$bin" "$logs/rollout.jsonl"
# 1, 2 and 4 processes on the one GPU (odc-run --local: the machine has no MPI), ODC over CUDA IPC:
# the 1-rank losses within bf16 rounding, bf16 gathers bit for bit.
ipc_cmd "${set_args[@]+"${set_args[@]}"}"
# Sequences over the cap split over 2 and 4 processes on the one GPU (k = 2..4), each run's losses
# within the ipc-train step's 2% of one process holding every sequence whole; the collective's static
# groups too when there is a GPU per rank (CUDA_VISIBLE_DEVICES narrows what nvidia-smi lists).
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  visible="$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)"
  [ "$visible" -lt "${gpus:-0}" ] && gpus=$visible
fi
context_cmd --gpus "${gpus:-0}" "${set_args[@]+"${set_args[@]}"}"
tests_args=(--durations yes)
[ -n "$tests_spec" ] && tests_args+=("$tests_spec")
step tests "$(lim tests)" "$bin/odc_cuda_tests" "${tests_args[@]}"
step comm-bandwidth "$(lim comm-bandwidth)" bash -c 'for n in 2 4; do "$1/odc-run" --local $n "$1/comm_bandwidth" --device cuda \
  --unit-mib 256 --units 4 --reps 5 --comms ipc,ipc-bf16 || exit 1; done >"$2"' comm-bandwidth "$bin" "$logs/comm-bandwidth.jsonl"
step model-parity "$(lim model-parity)" bash -c '"$1" >"$2"' model-parity "$bin/gpu_model_parity" "$logs/model-parity.jsonl"
step throughput "$(lim throughput)" bash -c '"$1" --attention "$3" >"$2"' throughput "$bin/gpu_model_throughput" \
  "$logs/throughput.jsonl" "$attention"
# Qwen2-1.5B, world 1, one sequence of each count, a few steps each (one JSON line per case as it
# ends, so a cut keeps the finished cases).
step long-context "$(lim long-context)" bash -c '"$1" "${@:3}" --steps 2 --warmup 1 >"$2"' long-context \
  "$bin/gpu_model_throughput" "$logs/long-context.jsonl" "${long_args[@]}"
step attention "$(lim attention)" bash -c '"$1" --impl "$3" >"$2"' attention "$bin/gpu_attention" "$logs/attention.jsonl" \
  "$attention_impls"
# Per-op device time of one 1B training step (CUDA events around every backend op).
step profile "$(lim profile)" bash -c '"$1/gpu_model_throughput" --attention "$5" --steps 3 --warmup 2 --profile "$3" >"$2" &&
  cp "$3" "$4"' profile "$bin" "$logs/profile.jsonl" "$logs/profile.json" "$out/profile.json" "$attention"
step throughput-torch "$(lim throughput-torch)" bash -c 'python3 "$1" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  throughput-torch "$b/py/gpu_model_torch.py" "$logs/throughput-torch.jsonl"
step long-context-torch "$(lim long-context-torch)" bash -c 'python3 "$1" "${@:3}" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  long-context-torch "$b/py/gpu_model_torch.py" "$logs/long-context-torch.jsonl" --shape qwen2-1.5b \
  --tokens "$long_tokens" --recompute "$torch_recompute" --sdpa "$torch_sdpa" --steps 2 --warmup 1
step attention-torch "$(lim attention-torch)" bash -c 'python3 "$1" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  attention-torch "$b/py/gpu_attention_torch.py" "$logs/attention-torch.jsonl"
step nccl "$(lim nccl)" bash -c '"$1" >"$2"' nccl "$bin/gpu_nccl" "$logs/nccl.jsonl"
step ceilings "$(lim ceilings)" bash -c '"$1" >"$2"' ceilings "$bin/gpu_ceilings" "$logs/ceilings.jsonl"
# compute-sanitizer starts the real program (not its wrapper), with the bundle's library path.
for tool in memcheck racecheck synccheck; do
  step "$tool" "$(lim "$tool")" "${bundle_env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$b/bin/odc_cuda_tests" "[sanitize]"
done
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv >"$logs/nvidia-smi-after.log" 2>&1
finish

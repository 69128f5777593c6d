#!/usr/bin/env bash
# The one prepared check for a lent GPU machine, run from the bundle that scripts/gpu-bundle.sh
# made here (that machine cannot build this project: it lacks MPI, UCX, yaml-cpp, ICU, ...).
#
#   scripts/gpu-check.sh [--dry-run] [--deadline S] [--only STEPS] BUNDLE OUT_DIR
#
#   BUNDLE      gpu-bundle/odc-gpu-bundle.tar.xz (or an unpacked odc-gpu/ folder)
#   OUT_DIR     receives exactly two files: summary.txt (also printed last, at most 40 lines) and
#               gpu-check.tar.gz (every log and JSON result)
#   --deadline  seconds for the whole check (default 270): a step runs only when its expected
#               seconds (the plan printed first) are left, and is cut to what is left; one that
#               does not fit is deferred (not run, not failed) and the summary names the --only
#               that runs it. 270 s leaves a second call room in 15 minutes of device time.
#   --only      a comma-separated list of step names (below) to run, e.g. the failed or deferred
#               steps of an earlier call: "--only ipc-train,throughput"; manifest, libraries and
#               env always run
#   --dry-run   everything except the GPU work, on any machine: prints the GPU run's plan,
#               unpacks and verifies the bundle, resolves every program's libraries and starts
#               each one, runs the trainer step on the CPU backend's bf16 mode, plans the
#               long-context cases' memory, compiles the Python peers, and writes the summary and
#               the archive from whatever results exist (tested in CI)
#
# Steps, most important first (the plan at the start gives each one's expected seconds): tests
# (odc_cuda_tests, one pass, [cudnn] included), trainer (odc-train on the GPU: rerun and resume
# bit for bit), throughput and throughput-torch (1B shape, ours and torch eager), model-parity,
# long-context and long-context-torch (Qwen2-1.5B shape, one 32K and one 64K sequence with
# recomputation: tokens/s, MFU, the allocator's peak against the memory plan), attention and
# attention-torch (native and cuDNN, torch SDPA), ipc-train, comm-bandwidth, nccl, ceilings,
# memcheck, racecheck, synccheck.
#
# Switches (environment; docs/GPU_CHECK.md): ODC_CHECK_SET ("key=value ..." appended as --set to
# every odc-train run), ODC_CHECK_ATTENTION (model benches' attention: auto|native|cudnn),
# ODC_CHECK_ATTENTION_IMPLS (gpu_attention --impl, default native,cudnn), ODC_CHECK_RECOMPUTE
# (long-context, default selective), ODC_CHECK_LONG_TOKENS (default 32768,65536),
# ODC_CHECK_TORCH_SDPA (the torch long-context peer's SDPA backend, default auto),
# ODC_CHECK_TESTS (a Catch2 test spec for odc_cuda_tests, e.g. "~[cudnn]"); passed through to the
# programs: CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT, ODC_CUDNN_LIBRARY.
#
# Exit: 0 when every step ran and passed; 1 when one failed; 3 when none failed but some were
# deferred; 2 on a usage error.
set -uo pipefail
dry_run=0
deadline=270
only=""
usage() { echo "usage: scripts/gpu-check.sh [--dry-run] [--deadline S] [--only STEPS] BUNDLE OUT_DIR" >&2; exit 2; }
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --deadline) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; deadline="$2"; shift 2 ;;
    --only) [ $# -ge 2 ] && [[ "$2" =~ ^[a-z0-9_,-]+$ ]] || usage; only=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,40p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1'" >&2; usage ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -eq 2 ] || usage
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
[[ "$attention" =~ ^(auto|native|cudnn)$ ]] || { echo "gpu-check: error: ODC_CHECK_ATTENTION='$attention': expected auto, native or cudnn" >&2; exit 2; }
[[ "$attention_impls" =~ ^(native|cudnn)(,(native|cudnn))*$ ]] || { echo "gpu-check: error: ODC_CHECK_ATTENTION_IMPLS='$attention_impls': expected native, cudnn or native,cudnn" >&2; exit 2; }
[[ "$recompute" =~ ^(none|selective|full)$ ]] || { echo "gpu-check: error: ODC_CHECK_RECOMPUTE='$recompute': expected none, selective or full" >&2; exit 2; }
[[ "$long_tokens" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "gpu-check: error: ODC_CHECK_LONG_TOKENS='$long_tokens': expected comma-separated token counts, e.g. 32768,65536" >&2; exit 2; }
[[ "$torch_sdpa" =~ ^(auto|flash|cudnn|efficient|math)$ ]] || { echo "gpu-check: error: ODC_CHECK_TORCH_SDPA='$torch_sdpa': expected auto, flash, cudnn, efficient or math" >&2; exit 2; }
# The torch peer has no selective recomputation: it checkpoints whole layers whenever ours recomputes.
torch_recompute=full
[ "$recompute" = none ] && torch_recompute=none

# ---- the plan: name, expected seconds, limit seconds, what it runs ----
# Expected seconds are estimates (the H200 runs of 2026-12-04 recorded only the whole check's time:
# its 17 steps, before the cuDNN and long-context additions, took 147-151 s; these split that total
# and estimate the new work) until the next run's steps.tsv replaces them. A step runs when its
# expected seconds are left.
plan=(
  "tests 35 120 odc_cuda_tests, one pass ([cudnn] included)"
  "trainer 10 60 odc-train rerun and resume bit for bit"
  "rl 10 60 the online GRPO loop on the GPU, rerun and resume bit for bit"
  "throughput 15 45 1B shape, ours"
  "throughput-torch 15 60 1B shape, torch eager"
  "model-parity 5 30 GPU bf16 vs CPU bf16 vs fp32"
  "long-context 45 90 Qwen2-1.5B, one sequence of each of ${long_tokens} tokens, recompute ${recompute}"
  "long-context-torch 30 75 the same, torch SDPA (${torch_sdpa}) + checkpoint"
  "attention 30 60 native and cuDNN (${attention_impls}), cuDNN graph builds"
  "attention-torch 15 40 torch SDPA flash / cuDNN / varlen"
  "ipc-train 20 90 1, 2, 4 processes over CUDA IPC"
  "comm-bandwidth 8 45 IPC gather / scatter-accumulate"
  "nccl 3 20 NCCL on one rank"
  "ceilings 3 30 cuBLASLt 8192^3, device copy"
  "memcheck 12 45 compute-sanitizer [sanitize]"
  "racecheck 10 45 compute-sanitizer [sanitize]"
  "synccheck 6 45 compute-sanitizer [sanitize]"
)
declare -A expected=() limit_of=()
selected() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
print_plan() {
  local total=8 first=8 fits=() deferred=() row name exp lim what
  printf 'gpu-check plan%s: deadline %ss (%ss kept for the summary); expected seconds are estimates\n' \
    "$([ "$dry_run" -eq 1 ] && echo ' of the GPU run (this dry run does the CPU steps instead)')" "$deadline" "$reserve"
  printf '  %-20s %5s %5s %6s  %s\n' step est.s limit cumul. what
  printf '  %-20s %5s %5s %6s  %s\n' "manifest+env" 8 90 8 "bundle manifest, libraries, nvidia-smi, torch"
  for row in "${plan[@]}"; do
    read -r name exp lim what <<<"$row"
    expected[$name]=$exp
    limit_of[$name]=$lim
    selected "$name" || continue
    total=$((total + exp))
    # As step() decides: a step runs when its expected seconds are left after those that ran.
    if [ $((first + exp)) -le $((deadline - reserve)) ]; then
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
for row in "${plan[@]}"; do  # print_plan ran in a subshell: fill the tables here
  read -r name exp lim _ <<<"$row"
  expected[$name]=$exp
  limit_of[$name]=$lim
done
echo "$plan_text" >&2
if [ -n "$only" ]; then  # a misspelt name would run nothing and pass: say so
  IFS=, read -r -a wanted <<<"${only//,,/,}"
  for name in "${wanted[@]}"; do
    [ -z "$name" ] || [ -n "${expected[$name]:-}" ] || [[ "$name" =~ ^(start-.*|python-peers)$ ]] \
      || echo "gpu-check: warning: --only names no step '$name' (steps: ${!expected[*]})" >&2
  done
fi

# This machine's own library path, for python3 (torch), nvidia-smi and the summary; the bundle's
# programs get theirs through the wrappers below.
mkdir -p "$out" || { echo "gpu-check: error: cannot create $out" >&2; exit 1; }
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/odc-gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs"
echo "$plan_text" >"$logs/plan.txt"
status_file="$logs/steps.tsv"
: >"$status_file"
failed=0
deferred=0
{
  echo "ODC_CHECK_SET=${ODC_CHECK_SET:-}"
  echo "ODC_CHECK_ATTENTION=$attention"
  echo "ODC_CHECK_ATTENTION_IMPLS=$attention_impls"
  echo "ODC_CHECK_RECOMPUTE=$recompute"
  echo "ODC_CHECK_LONG_TOKENS=$long_tokens"
  echo "ODC_CHECK_TORCH_SDPA=$torch_sdpa"
  echo "ODC_CHECK_TESTS=$tests_spec"
  echo "CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT=${CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT:-}"
  echo "ODC_CUDNN_LIBRARY=${ODC_CUDNN_LIBRARY:-}"
} >"$logs/switches.txt"

# step NAME LIMIT_S CMD...: runs CMD (output in logs/NAME.log) cut to the time left; records
# NAME, exit code and seconds in steps.tsv. A step whose expected seconds are not left is
# deferred: recorded as "deadline", not run.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - (SECONDS - start_s) - reserve))
  local rc took t0=$SECONDS need=${expected[$name]:-5}
  case "$name" in
    manifest|libraries|env) need=0; [ "$left" -lt "$limit" ] && left=$limit ;;  # always run, seconds each
    *) selected "$name" || return 0 ;;
  esac
  [ "$dry_run" -eq 1 ] && [ "$need" -gt 5 ] && need=5
  if [ "$left" -lt "$need" ]; then
    printf '%s\t%s\t%s\n' "$name" "deadline" 0 >>"$status_file"
    deferred=1
    echo "gpu-check: $name deferred (expected ${need}s, ${left}s left)" >&2
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s): $*" >>"$logs/$name.log"
  timeout --kill-after=5 "$limit" "$@" >>"$logs/$name.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  printf '%s\t%s\t%s\n' "$name" "$rc" "$took" >>"$status_file"
  [ "$rc" -ne 0 ] && failed=1
  echo "gpu-check: $name rc=$rc ${took}s" >&2
  return $rc
}
lim() { echo "${limit_of[$1]}"; }

finish() {
  local summary="$out/summary.txt" cut
  python3 "$b/py/gpu_check_summary.py" "$logs" "$dry_run" >"$summary" 2>>"$logs/summary-errors.log" \
    || { echo "summary failed; steps:" >"$summary"; cat "$status_file" >>"$summary"; failed=1; }
  tar -C "$work" -czf "$out/gpu-check.tar.gz" logs
  cat "$summary"
  cut="$(awk -F'\t' '$2 == "deadline" {print $1}' "$status_file" | paste -sd, -)"
  [ -n "$cut" ] && echo "gpu-check: deferred: scripts/gpu-check.sh --only $cut BUNDLE OUT" >&2
  [ "$failed" -ne 0 ] && exit 1
  [ "$deferred" -ne 0 ] && exit 3
  exit 0
}

# ---- the bundle ----
if [ -d "$bundle" ]; then
  b="$(cd "$bundle" && pwd)"
else
  [ -f "$bundle" ] || { echo "gpu-check: error: no bundle at '$bundle' (make one with scripts/gpu-bundle.sh)" >&2; exit 1; }
  tar -C "$work" -xJf "$bundle" || { echo "gpu-check: error: '$bundle' is not a readable .tar.xz bundle" >&2; exit 1; }
  b="$work/odc-gpu"
fi
[ -f "$b/MANIFEST.sha256" ] || { echo "gpu-check: error: $b has no MANIFEST.sha256: not a gpu-bundle.sh bundle" >&2; exit 1; }
step manifest 30 bash -c 'cd "$1" && sha256sum --quiet -c MANIFEST.sha256' manifest "$b" || finish
cp "$b/COMMIT" "$b/BUNDLE.json" "$logs/"

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

# nvidia-smi and python3 with this machine's environment (the log shows the library path they see).
step env 30 bash -c 'nvidia-smi || echo "nvidia-smi: none"; echo "machine LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}";
  python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.is_available(), \"cudnn\", torch.backends.cudnn.version())" || echo "torch: none"
  cat "$1/COMMIT" "$2"' env "$b" "$logs/switches.txt"

long_args=(--shape qwen2-1.5b --tokens "$long_tokens" --recompute "$recompute" --attention "$attention")
if [ "$dry_run" -eq 1 ]; then
  # Each program starts with the bundle's libraries: without a device it exits 77 (SKIP) or, asked
  # for --help, 0.
  for p in gpu_ceilings gpu_nccl gpu_gemm gpu_attention gpu_model_parity gpu_model_throughput odc_cuda_tests; do
    step "start-$p" 20 bash -c '"$1"; rc=$?; [ $rc -eq 77 ] || [ $rc -eq 0 ]' start "$bin/$p"
  done
  step start-odc-train 20 "$bin/odc-train" --help
  # The trainer step itself, on the CPU backend's bf16 mode at a smaller shape.
  step trainer 120 bash -c 'python3 "$1/py/gpu_check_train.py" "$2/odc-train" "$1/configs/gpu-check-train.yaml" \
    "$1/data/gpu-train.jsonl" "$3/train" --set model.device=cpu --set model.config.hidden_size=128 \
    --set model.config.intermediate_size=256 --set model.config.num_hidden_layers=2 \
    --set model.config.num_attention_heads=2 --set model.config.num_key_value_heads=1 \
    --set data.minibatch_size=4 --set train.steps=4 "${@:5}" >"$4"' trainer "$b" "$bin" "$work" "$logs/trainer.jsonl" \
    "${set_args[@]+"${set_args[@]}"}"
  # The rl step: the online GRPO loop, on the CPU backend's bf16 mode at a smaller shape.
  step rl 120 bash -c 'python3 "$1/py/gpu_check_train.py" "$2/odc-train" "$1/configs/gpu-check-rl.yaml" - \
    "$3/rl" --steps 6 --name gpu_check_rl --set "rl.prompts=$1/data/rl-prompts.jsonl" \
    --set "data.tokenizer=$1/data/tokenizer/tokenizer.json" --set model.device=cpu \
    --set model.config.hidden_size=128 --set model.config.intermediate_size=256 \
    --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=2 \
    --set model.config.num_key_value_heads=1 "${@:5}" >"$4"' rl "$b" "$bin" "$work" "$logs/rl.jsonl" \
    "${set_args[@]+"${set_args[@]}"}"
  # Several ranks without MPI (odc-run --local), ODC over the IPC transport: here host shared
  # memory, on the GPU CUDA IPC; and the comms' bandwidth bench, tiny.
  step ipc-train 120 bash -c 'python3 "$1/py/gpu_check_ipc.py" "$2/odc-run" "$2/odc-train" \
    "$1/configs/gpu-check-ipc.yaml" "$1/data/gpu-train.jsonl" "$3/ipc" --ranks 1,2 --set model.device=cpu \
    --set model.config.hidden_size=128 --set model.config.intermediate_size=256 \
    --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=2 \
    --set model.config.num_key_value_heads=1 --set train.steps=4 --set train.threads=1 "${@:5}" >"$4"' \
    ipc-train "$b" "$bin" "$work" "$logs/ipc-train.jsonl" "${set_args[@]+"${set_args[@]}"}"
  step comm-bandwidth 60 bash -c '"$1/odc-run" --local 2 "$1/comm_bandwidth" --device cpu --unit-mib 1 \
    --units 2 --reps 1 --comms ipc,ipc-bf16 >"$2"' comm-bandwidth "$bin" "$logs/comm-bandwidth.jsonl"
  # The long-context step's cases as the GPU run gives them: their memory plans (a 139.8 GiB
  # H200), and the same arguments on a tiny CPU shape (the program's whole path, not its speed).
  step long-context 60 bash -c '"$1/gpu_model_throughput" "${@:4}" --plan-only --device-gib 139.8 >"$2" &&
    "$1/gpu_model_throughput" --cpu-tiny --shape qwen2-1.5b --tokens 256,512 --recompute "$3" --steps 2 --warmup 1' \
    long-context "$bin" "$logs/long-context.jsonl" "$recompute" "${long_args[@]}"
  step python-peers 30 python3 -m py_compile "$b"/py/*.py
  finish
fi

# In the plan's order, so that the deadline defers the least important.
tests_args=(--durations yes)
[ -n "$tests_spec" ] && tests_args+=("$tests_spec")
step tests "$(lim tests)" "$bin/odc_cuda_tests" "${tests_args[@]}"
step trainer "$(lim trainer)" bash -c 'python3 "$1/py/gpu_check_train.py" "$2/odc-train" "$1/configs/gpu-check-train.yaml" \
  "$1/data/gpu-train.jsonl" "$3/train" "${@:5}" >"$4"' trainer "$b" "$bin" "$work" "$logs/trainer.jsonl" \
  "${set_args[@]+"${set_args[@]}"}"
step rl "$(lim rl)" bash -c 'python3 "$1/py/gpu_check_train.py" "$2/odc-train" "$1/configs/gpu-check-rl.yaml" - \
  "$3/rl" --steps 6 --name gpu_check_rl --set "rl.prompts=$1/data/rl-prompts.jsonl" \
  --set "data.tokenizer=$1/data/tokenizer/tokenizer.json" "${@:5}" >"$4"' rl "$b" "$bin" "$work" "$logs/rl.jsonl" \
  "${set_args[@]+"${set_args[@]}"}"
step throughput "$(lim throughput)" bash -c '"$1" --attention "$3" >"$2"' throughput "$bin/gpu_model_throughput" \
  "$logs/throughput.jsonl" "$attention"
step throughput-torch "$(lim throughput-torch)" bash -c 'python3 "$1" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  throughput-torch "$b/py/gpu_model_torch.py" "$logs/throughput-torch.jsonl"
step model-parity "$(lim model-parity)" bash -c '"$1" >"$2"' model-parity "$bin/gpu_model_parity" "$logs/model-parity.jsonl"
# Qwen2-1.5B, world 1, one sequence of each count, a few steps each (one JSON line per case as it
# ends, so a cut keeps the finished cases); then torch on the same shape and tokens.
step long-context "$(lim long-context)" bash -c '"$1" "${@:3}" --steps 2 --warmup 1 >"$2"' long-context \
  "$bin/gpu_model_throughput" "$logs/long-context.jsonl" "${long_args[@]}"
step long-context-torch "$(lim long-context-torch)" bash -c 'python3 "$1" "${@:3}" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  long-context-torch "$b/py/gpu_model_torch.py" "$logs/long-context-torch.jsonl" --shape qwen2-1.5b \
  --tokens "$long_tokens" --recompute "$torch_recompute" --sdpa "$torch_sdpa" --steps 2 --warmup 1
step attention "$(lim attention)" bash -c '"$1" --impl "$3" >"$2"' attention "$bin/gpu_attention" "$logs/attention.jsonl" \
  "$attention_impls"
step attention-torch "$(lim attention-torch)" bash -c 'python3 "$1" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  attention-torch "$b/py/gpu_attention_torch.py" "$logs/attention-torch.jsonl"
# 1, 2 and 4 processes on the one GPU (odc-run --local: the machine has no MPI), ODC over CUDA IPC:
# the 1-rank losses within bf16 rounding, bf16 gathers bit for bit; then the IPC gather and
# scatter-accumulate bandwidth against a device copy, with 2 and 4 processes.
step ipc-train "$(lim ipc-train)" bash -c 'python3 "$1/py/gpu_check_ipc.py" "$2/odc-run" "$2/odc-train" \
  "$1/configs/gpu-check-ipc.yaml" "$1/data/gpu-train.jsonl" "$3/ipc" "${@:5}" >"$4"' ipc-train "$b" "$bin" "$work" \
  "$logs/ipc-train.jsonl" "${set_args[@]+"${set_args[@]}"}"
step comm-bandwidth "$(lim comm-bandwidth)" bash -c 'for n in 2 4; do "$1/odc-run" --local $n "$1/comm_bandwidth" --device cuda \
  --unit-mib 256 --units 4 --reps 5 --comms ipc,ipc-bf16 || exit 1; done >"$2"' comm-bandwidth "$bin" "$logs/comm-bandwidth.jsonl"
step nccl "$(lim nccl)" bash -c '"$1" >"$2"' nccl "$bin/gpu_nccl" "$logs/nccl.jsonl"
step ceilings "$(lim ceilings)" bash -c '"$1" >"$2"' ceilings "$bin/gpu_ceilings" "$logs/ceilings.jsonl"
# compute-sanitizer starts the real program (not its wrapper), with the bundle's library path.
for tool in memcheck racecheck synccheck; do
  step "$tool" "$(lim "$tool")" "${bundle_env[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$b/bin/odc_cuda_tests" "[sanitize]"
done
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv >"$logs/nvidia-smi-after.log" 2>&1
finish

#!/usr/bin/env bash
# The one prepared check for a lent GPU machine, run from the bundle that scripts/gpu-bundle.sh
# made here (that machine cannot build this project: it lacks MPI, UCX, yaml-cpp, ICU, ...).
#
#   scripts/gpu-check.sh [--dry-run] [--deadline S] [--only STEPS] BUNDLE OUT_DIR
#
#   BUNDLE      gpu-bundle/odc-gpu-bundle.tar.xz (or an unpacked odc-gpu/ folder)
#   OUT_DIR     receives exactly two files: summary.txt (also printed last, at most 40 lines) and
#               gpu-check.tar.gz (every log and JSON result)
#   --deadline  seconds for the whole check (default 420): every step is cut to what is left, so
#               the check ends inside one 600 s command with time to spare
#   --only      a comma-separated list of step names (below) to run, e.g. the failed or deadline-cut
#               steps of an earlier call: "--only ipc-train,throughput"; manifest, libraries and env
#               always run
#   --dry-run   everything except the GPU work, on any machine: unpacks and verifies the bundle,
#               resolves every program's libraries and starts each one, runs the trainer step on
#               the CPU backend's bf16 mode, compiles the Python peers,
#               and writes the summary and the archive from whatever results exist (tested in CI)
#
# Steps (name: what it runs), most important first: env (nvidia-smi, torch), tests
# (odc_cuda_tests, one pass), trainer (odc-train on the GPU: rerun and resume bit for bit,
# scripts/gpu_check_train.py), ipc-train (1, 2 and 4 odc-train processes on the one GPU through
# odc-run --local, ODC over CUDA IPC: the 1-rank losses, bf16 gathers bitwise; scripts/gpu_check_ipc.py),
# comm-bandwidth (IPC gather / scatter-accumulate against a device copy, 2 and 4 processes),
# ceilings (cuBLASLt bf16 8192^3, device copy), nccl (NCCL all-gather
# and reduce-scatter of 64 and 256 MiB on one rank against a device copy), model-parity (GPU
# bf16 vs CPU bf16 vs CPU fp32, tiny model), throughput (1B shape, ours and torch eager),
# attention (ours and torch SDPA flash/cuDNN on the same shapes), memcheck / racecheck /
# synccheck (compute-sanitizer on the [sanitize] cases). Exit: 0 when every step passed, else 1;
# 2 on a usage error.
set -uo pipefail
dry_run=0
deadline=420
only=""
usage() { echo "usage: scripts/gpu-check.sh [--dry-run] [--deadline S] [--only STEPS] BUNDLE OUT_DIR" >&2; exit 2; }
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --deadline) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || usage; deadline="$2"; shift 2 ;;
    --only) [ $# -ge 2 ] && [[ "$2" =~ ^[a-z0-9_,-]+$ ]] || usage; only=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1'" >&2; usage ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -eq 2 ] || usage
bundle="${args[0]}"
out="${args[1]}"
start_s=$SECONDS
# This machine's own library path, for its python3 (torch): the bundle's libraries precede it only
# for the bundle's programs (below).
torch_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}")
mkdir -p "$out" || { echo "gpu-check: error: cannot create $out" >&2; exit 1; }
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/odc-gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs"
status_file="$logs/steps.tsv"
: >"$status_file"
failed=0

# step NAME LIMIT_S CMD...: runs CMD (output in logs/NAME.log) cut to the time left; records
# NAME, exit code and seconds in steps.tsv.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - (SECONDS - start_s) - 15))  # 15 s kept for the summary and archive
  local rc took t0=$SECONDS
  case "$name" in
    manifest|libraries|env) ;;
    *) if [ -n "$only" ] && [[ "$only" != *",$name,"* ]]; then return 0; fi ;;
  esac
  if [ "$left" -lt 5 ]; then
    # Not run, not failed: the summary lists it for a rerun with --only.
    printf '%s\t%s\t%s\n' "$name" "deadline" 0 >>"$status_file"
    failed=1
    echo "gpu-check: $name not run (deadline)" >&2
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

finish() {
  local summary="$out/summary.txt"
  "${torch_env[@]}" python3 "$b/py/gpu_check_summary.py" "$logs" "$dry_run" >"$summary" 2>>"$logs/summary-errors.log" \
    || { echo "summary failed; steps:" >"$summary"; cat "$status_file" >>"$summary"; failed=1; }
  tar -C "$work" -czf "$out/gpu-check.tar.gz" logs
  cat "$summary"
  exit $((failed != 0))
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

# CUDA's libraries come from this machine: the toolkit, else PyTorch's nvidia-* wheels.
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
# The bundle's libraries (Debian's libstdc++, ...) come first for the bundle's programs only: the
# Python peers (torch) run with this machine's own library path (torch_env).
export LD_LIBRARY_PATH="$b/lib${cuda_libs:+:$cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$b/bin"
step libraries 30 bash -c 'for p in "$1"/*; do if ldd "$p" | grep "not found"; then echo "$p: unresolved"; exit 1; fi; done; echo all resolved' \
  libraries "$bin" || finish

step env 30 "${torch_env[@]}" bash -c 'nvidia-smi || echo "nvidia-smi: none"; python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.is_available())" || echo "torch: none"; cat "$1/COMMIT"' env "$b"

if [ "$dry_run" -eq 1 ]; then
  # Each program starts with the bundle's libraries: without a device it exits 77 (SKIP) or, asked
  # for --help, 0.
  for p in gpu_ceilings gpu_nccl gpu_gemm gpu_attention gpu_model_parity gpu_model_throughput odc_cuda_tests; do
    step "start-$p" 20 bash -c '"$1"; rc=$?; [ $rc -eq 77 ] || [ $rc -eq 0 ]' start "$bin/$p"
  done
  step start-odc-train 20 "$bin/odc-train" --help
  # The trainer step itself, on the CPU backend's bf16 mode at a smaller shape.
  step trainer 120 bash -c 'python3 "$1/py/gpu_check_train.py" "$1/bin/odc-train" "$1/configs/gpu-check-train.yaml" \
    "$1/data/gpu-train.jsonl" "$2/train" --set model.device=cpu --set model.config.hidden_size=128 \
    --set model.config.intermediate_size=256 --set model.config.num_hidden_layers=2 \
    --set model.config.num_attention_heads=2 --set model.config.num_key_value_heads=1 \
    --set data.minibatch_size=4 --set train.steps=4 >"$3"' trainer "$b" "$work" "$logs/trainer.jsonl"
  # Several ranks without MPI (odc-run --local), ODC over the IPC transport: here host shared
  # memory, on the GPU CUDA IPC; and the comms' bandwidth bench, tiny.
  step ipc-train 120 bash -c 'python3 "$1/py/gpu_check_ipc.py" "$1/bin/odc-run" "$1/bin/odc-train" \
    "$1/configs/gpu-check-ipc.yaml" "$1/data/gpu-train.jsonl" "$2/ipc" --ranks 1,2 --set model.device=cpu \
    --set model.config.hidden_size=128 --set model.config.intermediate_size=256 \
    --set model.config.num_hidden_layers=2 --set model.config.num_attention_heads=2 \
    --set model.config.num_key_value_heads=1 --set train.steps=4 --set train.threads=1 >"$3"' \
    ipc-train "$b" "$work" "$logs/ipc-train.jsonl"
  step comm-bandwidth 60 bash -c '"$1/bin/odc-run" --local 2 "$1/bin/comm_bandwidth" --device cpu --unit-mib 1 \
    --units 2 --reps 1 --comms ipc,ipc-bf16 >"$2"' comm-bandwidth "$b" "$logs/comm-bandwidth.jsonl"
  step python-peers 30 python3 -m py_compile "$b"/py/*.py
  finish
fi

# In order of what the check is for, so that a deadline cuts the least important last.
step tests 120 "$bin/odc_cuda_tests" --durations yes
step trainer 90 bash -c 'python3 "$1/py/gpu_check_train.py" "$1/bin/odc-train" "$1/configs/gpu-check-train.yaml" \
  "$1/data/gpu-train.jsonl" "$2/train" >"$3"' trainer "$b" "$work" "$logs/trainer.jsonl"
# 1, 2 and 4 processes on the one GPU (odc-run --local: the machine has no MPI), ODC over CUDA IPC:
# the 1-rank losses within bf16 rounding, bf16 gathers bit for bit; then the IPC gather and
# scatter-accumulate bandwidth against a device copy, with 2 and 4 processes.
step ipc-train 90 bash -c 'python3 "$1/py/gpu_check_ipc.py" "$1/bin/odc-run" "$1/bin/odc-train" \
  "$1/configs/gpu-check-ipc.yaml" "$1/data/gpu-train.jsonl" "$2/ipc" >"$3"' ipc-train "$b" "$work" "$logs/ipc-train.jsonl"
step comm-bandwidth 45 bash -c 'for n in 2 4; do "$1/bin/odc-run" --local $n "$1/bin/comm_bandwidth" --device cuda \
  --unit-mib 256 --units 4 --reps 5 --comms ipc,ipc-bf16 || exit 1; done >"$2"' comm-bandwidth "$b" "$logs/comm-bandwidth.jsonl"
step ceilings 30 bash -c '"$1" >"$2"' ceilings "$bin/gpu_ceilings" "$logs/ceilings.jsonl"
step nccl 20 bash -c '"$1" >"$2"' nccl "$bin/gpu_nccl" "$logs/nccl.jsonl"
step model-parity 45 bash -c '"$1" >"$2"' model-parity "$bin/gpu_model_parity" "$logs/model-parity.jsonl"
step throughput 60 bash -c '"$1" >"$2"' throughput "$bin/gpu_model_throughput" "$logs/throughput.jsonl"
step throughput-torch 60 "${torch_env[@]}" bash -c 'python3 "$1" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  throughput-torch "$b/py/gpu_model_torch.py" "$logs/throughput-torch.jsonl"
step attention 30 bash -c '"$1" >"$2"' attention "$bin/gpu_attention" "$logs/attention.jsonl"
step attention-torch 45 "${torch_env[@]}" bash -c 'python3 "$1" >"$2"; rc=$?; [ $rc -eq 77 ] && exit 0; exit $rc' \
  attention-torch "$b/py/gpu_attention_torch.py" "$logs/attention-torch.jsonl"
for tool in memcheck racecheck synccheck; do
  step "$tool" 30 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/odc_cuda_tests" "[sanitize]"
done
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv >"$logs/nvidia-smi-after.log" 2>&1
finish

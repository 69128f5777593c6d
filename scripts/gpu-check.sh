#!/usr/bin/env bash
# One prepared check for a lent GPU machine: configure with the CUDA backend, build the CUDA tests,
# run them, and leave logs and a summary under OUT_DIR. Sized for <= 8 minutes on 16 cores.
#
#   scripts/gpu-check.sh OUT_DIR [BUILD_DIR]
#
# OUT_DIR/summary.txt   one line per step: name, exit code, seconds
# OUT_DIR/*.log         nvidia-smi, configure, build, test output; junit.xml from Catch2
# Exit status: 0 when every step passed, else the first failing step's code.
set -uo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUT_DIR [BUILD_DIR]" >&2
  exit 2
fi
OUT_DIR=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${2:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
SUMMARY=$OUT_DIR/summary.txt
: >"$SUMMARY"
STATUS=0

# step NAME TIMEOUT_S CMD...: runs CMD with a time limit, logs to OUT_DIR/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "== $name: $*" | tee -a "$OUT_DIR/$name.log"
  timeout --kill-after=10 "$limit" "$@" >>"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  printf '%-12s rc=%-4s %4ss\n' "$name" "$rc" "$took" | tee -a "$SUMMARY"
  if [[ $rc -ne 0 && $STATUS -eq 0 ]]; then STATUS=$rc; fi
  return $rc
}

export PATH=/usr/local/cuda/bin:$PATH
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  git -C "$ROOT" status --short 2>/dev/null | head -50
  nvcc --version 2>&1 | tail -2
} >"$OUT_DIR/env.log"

step nvidia-smi 30 nvidia-smi
step configure 120 cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DODC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a || { cat "$SUMMARY"; exit $STATUS; }
step build 300 ninja -C "$BUILD_DIR" -j"$JOBS" odc_cuda_tests || { tail -40 "$OUT_DIR/build.log"; cat "$SUMMARY"; exit $STATUS; }
# The test binary directly (its [cuda] lines carry the max errors and cosines), with a junit report.
step cuda-tests 180 "$BUILD_DIR/bin/odc_cuda_tests" --durations yes
step cuda-junit 120 "$BUILD_DIR/bin/odc_cuda_tests" -r junit -o "$OUT_DIR/junit.xml"
# The ctest registration (SKIP_RETURN_CODE 77 when no device).
step ctest 120 ctest --test-dir "$BUILD_DIR" -R '^cuda/' --output-on-failure
# cuBLASLt linear layer and fused LM head + cross-entropy throughput on LLaMA-1B shapes: one JSON
# line per shape in OUT_DIR/gemm.jsonl (stderr in gemm-bench.log).
if step gemm-build 300 ninja -C "$BUILD_DIR" -j"$JOBS" gpu_gemm; then
  step gemm-bench 120 bash -c '"$1" >"$2"' gemm-bench "$BUILD_DIR/bin/gpu_gemm" "$OUT_DIR/gemm.jsonl"
fi
# Causal varlen attention (cuda_attention.h) against PyTorch's flash SDPA on the same shapes: JSON
# lines of both in OUT_DIR/attention.jsonl, our TFLOP/s over torch's per shape in
# OUT_DIR/attention-summary.txt. A missing torch (exit 77) skips the comparison without failing.
if step attn-build 180 ninja -C "$BUILD_DIR" -j"$JOBS" gpu_attention; then
  step attn-bench 90 bash -c '"$1" >"$2"' attn-bench "$BUILD_DIR/bin/gpu_attention" \
    "$OUT_DIR/attention.jsonl"
  step attn-torch 150 bash -c 'python3 "$1" >>"$2"; rc=$?; [[ $rc -eq 77 ]] && exit 0; exit $rc' \
    attn-torch "$ROOT/bench/gpu_attention_torch.py" "$OUT_DIR/attention.jsonl"
  step attn-summary 30 python3 - "$OUT_DIR/attention.jsonl" "$OUT_DIR/attention-summary.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.lstrip().startswith("{")]
key = lambda r: (r["shape"], r["n_heads"], r["n_kv_heads"], r["head_dim"])
ours = {key(r): r for r in rows if r.get("impl") == "odc"}
ref = {key(r): r for r in rows if r.get("impl") == "torch_sdpa_flash" and "error" not in r}
lines = ["shape      heads  fwd TFLOP/s odc/torch (ratio)   fwd+bwd TFLOP/s odc/torch (ratio)"]
for k, o in ours.items():
    t = ref.get(k)
    cell = lambda f: (f"{o[f]:7.1f} / {t[f]:7.1f} ({o[f] / t[f]:4.2f})" if t and t[f] > 0
                      else f"{o[f]:7.1f} /     n/a       ")
    lines.append(f"{k[0]:10s} {k[1]:2d}/{k[2]:<2d}  {cell('fwd_tflops')}   {cell('fwdbwd_tflops')}")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
fi
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv \
  >"$OUT_DIR/nvidia-smi-after.log" 2>&1 || true

grep -h '^\[cuda\]' "$OUT_DIR/cuda-tests.log" >"$OUT_DIR/parity.txt" 2>/dev/null || true
echo "---- summary ($OUT_DIR)"
cat "$SUMMARY"
tail -5 "$OUT_DIR/cuda-tests.log"
cat "$OUT_DIR/attention-summary.txt" 2>/dev/null || true
exit $STATUS

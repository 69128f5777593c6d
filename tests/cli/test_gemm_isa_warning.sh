#!/usr/bin/env bash
# odc-train names its GEMM path at start-up and warns when the GEMMs run below the ISA the CPU
# supports: oneDNN capped at SSE4.1 (ONEDNN_MAX_CPU_ISA, its documented switch) on a CPU with AVX
# or better must give the warning, with the ISAs named; uncapped, the GEMM ISA is the CPU's and
# there is no warning. Usage: test_gemm_isa_warning.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$bin/odc-data" synth --out "$work/d.jsonl" --num 16 --max-length 32 --mean-length 16 --seed 1 >/dev/null
small=(--set "model.config={vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1}"
       --set data.minibatch_size=2 --set train.steps=1 --set "data.train=$work/d.jsonl")

out=$(timeout 120 "$bin/odc-train" "${small[@]}" 2>&1) || fail "uncapped run" "$out"
line=$(echo "$out" | grep -m1 "\] cpu: " || true)
cpu_isa=$(echo "$line" | sed -n 's/.*, ISA \([a-z0-9_]*\); GEMM.*/\1/p')
gemm_isa=$(echo "$line" | sed -n 's/.*; GEMM oneDNN [0-9.]* (\([a-z0-9_]*\), .*/\1/p')
if [ -z "$cpu_isa" ] || [ -z "$gemm_isa" ]; then
  fail "start-up line names the CPU ISA and the GEMM path" "$out"
else
  echo "ok   [start-up: CPU ISA $cpu_isa, oneDNN GEMM ISA $gemm_isa]"
  if echo "$out" | grep -q "the GEMMs run .* kernels but this CPU supports"; then
    fail "no warning when the GEMMs run the CPU's ISA" "$line"
  else
    echo "ok   [no ISA warning uncapped]"
  fi
fi

case "$cpu_isa" in
  sse41|unknown|"") echo "skip [the capped run: this CPU has nothing above SSE4.1 to leave idle]" ;;
  *)
    out=$(ONEDNN_MAX_CPU_ISA=SSE41 timeout 120 "$bin/odc-train" "${small[@]}" 2>&1) || fail "capped run" "$out"
    if echo "$out" | grep -q "\[warning\] the GEMMs run sse41 kernels but this CPU supports $cpu_isa"; then
      echo "ok   [ONEDNN_MAX_CPU_ISA=SSE41 warns: sse41 GEMMs on a $cpu_isa CPU]"
    else
      fail "ONEDNN_MAX_CPU_ISA=SSE41 gives the ISA warning" "$out"
    fi
    ;;
esac

finish_test "all passed"

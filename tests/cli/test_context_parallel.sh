#!/usr/bin/env bash
# Context parallelism from the command line: sequences of 3500 tokens, more than the microbatch cap
# train.memory_budget_gib lets one rank hold (data.max_tokens_per_microbatch: auto), are refused on
# one rank and with train.context_parallel: off; on 2 ranks they train split (ODC over shared
# memory with groups per minibatch, and the collective over MPI with a static degree), and the
# memory plan, which counts the split's key segments and exchange region, holds the measured peak
# resident-set growth within 10%, as test_memory_plan.sh holds the unsplit runs. A degree that
# cannot hold the shares is refused naming the sequence and the ranks it needs.
# Usage: test_context_parallel.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PYTHONPATH="$root/tests/helpers" "$py" - "$work/len3500.jsonl" <<'EOF2'
import random, sys
from synthetic_data import random_record, write_jsonl
rng = random.Random(3500)
write_jsonl(sys.argv[1], [random_record(rng, 2048, 3500) for _ in range(4)])
EOF2
common=(--set "model.config={vocab_size: 2048, hidden_size: 384, intermediate_size: 1024, num_hidden_layers: 4, num_attention_heads: 6, num_key_value_heads: 2, max_position_embeddings: 4096}"
        --set data.minibatch_size=1 --set train.steps=2 --set train.warmup_steps=0 --set train.peak_flops=1e12
        --set "data.train=$work/len3500.jsonl" --set data.max_tokens_per_microbatch=auto --set train.memory_budget_gib=0.35)

# One rank: refused, naming auto and the ranks a split would need.
out="$(timeout 300 "$bin/odc-train" "${common[@]}" 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -qE "exceeds the microbatch cap.*auto: the most the memory plan fits.*split over [0-9]+ ranks .context parallelism. its shares would fit" \
  || fail "one rank refuses a sequence over the auto cap, naming the split that would fit" "$(echo "$out" | tail -3)"

# Two ranks with context parallelism off: refused, naming the switch.
out="$(timeout 300 "$bin/odc-run" --local 2 "$bin/odc-train" "${common[@]}" --set train.context_parallel=off 2>&1)"
[ $? -ne 0 ] && echo "$out" | grep -q "train.context_parallel: auto would split it over 2 ranks" \
  || fail "context parallelism off refuses it, naming the switch" "$(echo "$out" | tail -3)"

# check NAME LAUNCH...: trains, splits, and the plan holds the measured peak within 10%.
check() {
  local name="$1"
  shift
  timeout 300 "$@" "$bin/odc-train" "${common[@]}" "${extra[@]}" > "$work/$name.log" 2>&1 \
    || { fail "$name trains the split sequences" "$(tail -20 "$work/$name.log")"; return 1; }
  grep -q "context parallelism: sequences over the microbatch cap" "$work/$name.log" \
    || fail "$name says it splits" "$(grep 'memory:\|data:' "$work/$name.log")"
  local line error
  line="$(grep -o 'memory: predicted .*' "$work/$name.log" | head -1)"
  error="$(echo "$line" | sed -n 's/.*, \([-+][0-9.]*\)%$/\1/p')"
  echo "$name: $line"
  "$py" -c "import sys; sys.exit(0 if abs(float(sys.argv[1])) <= 10.0 else 1)" "${error:-1e9}" \
    || fail "$name: measured within 10% of the plan" "$line"
}
extra=()
check odc-local2 "$bin/odc-run" --local 2
extra=(--set train.comm=collective)
check collective-mpi2 "${mpirun[@]}" -np 2

# A degree of 1 under the collective cannot hold a 3500-token sequence: refused before training.
out="$(timeout 300 "${mpirun[@]}" -np 2 "$bin/odc-train" "${common[@]}" --set train.comm=collective \
       --set data.max_tokens_per_microbatch=1024 --set train.context_parallel_degree=1 2>&1)"
echo "$out" | grep -q "sequence 0 has length 3500.*exceeds the microbatch cap" \
  || fail "a static degree of 1 refuses the long sequence" "$(echo "$out" | tail -3)"
out="$(timeout 300 "$bin/odc-run" --local 2 "$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=1024 2>&1)"
echo "$out" | grep -qE "split over 2 ranks, the most train.context_parallel allows.*share is still 1750 tokens.*it needs 4 ranks" \
  || fail "a sequence no group of the world fits is refused naming the ranks it needs" "$(echo "$out" | tail -3)"
finish_test "context parallelism: refused on one rank and when off, trained split on 2 ranks within the memory plan"

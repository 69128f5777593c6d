#!/usr/bin/env bash
# The memory plan (train/plan/memory_plan.h) against what odc-train uses: the peak resident set's growth
# from just before the model is built to the end of the run, which every run logs beside the plan
# ("memory: predicted X per rank, measured Y"), must be within 10% of the prediction for
# none/selective/full recomputation at three microbatch lengths (one rank, fp32), in the CPU bf16
# mode, at 2 ranks (ODC over shared memory, the collective over MPI), and from a Hugging Face
# checkpoint (model.checkpoint, 1 and 2 ranks: what the load holds). Then what the plan
# drives: data.max_tokens_per_microbatch: auto picks the largest cap that fits
# train.memory_budget_gib (256 more tokens would not) and the run stays inside it; a cap the budget
# cannot hold is refused before training with the plan's table (exit 1, no checkpoint written);
# --plan-memory says whether a plan fits (exit 0 / 1) and plans a GPU node from this machine.
# Usage: test_memory_plan.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Sequences of exactly L tokens, so that every microbatch is one sequence at the cap.
for length in 512 1024 2048 3000; do
  PYTHONPATH="$root/tests/helpers" "$py" - "$work/len$length.jsonl" "$length" <<'EOF'
import random, sys
from synthetic_data import random_record, write_jsonl
rng, n = random.Random(int(sys.argv[2])), int(sys.argv[2])
write_jsonl(sys.argv[1], [random_record(rng, 2048, n) for _ in range(4)])
EOF
done
common=(--set "model.config={vocab_size: 2048, hidden_size: 384, intermediate_size: 1024, num_hidden_layers: 4, num_attention_heads: 6, num_key_value_heads: 2, max_position_embeddings: 4096}"
        --set data.minibatch_size=1 --set train.steps=1 --set train.warmup_steps=0 --set train.peak_flops=1e12)

# check NAME NP ARGS...: runs odc-train and checks rank 0's "memory: predicted ... measured" line.
check() {
  local name="$1" np="$2"
  shift 2
  local cmd=("$bin/odc-train" "${common[@]}" "$@")
  if [ "$np" = local2 ]; then
    cmd=("$bin/odc-run" --local 2 "${cmd[@]}")
  elif [ "$np" -gt 1 ]; then
    cmd=("${mpirun[@]}" -np "$np" "${cmd[@]}")
  fi
  timeout 300 "${cmd[@]}" > "$work/$name.log" 2>&1 || { fail "$name runs" "$(tail -20 "$work/$name.log")"; return 1; }
  local line
  line="$(grep -o 'memory: predicted .*' "$work/$name.log" | head -1)"
  if [ -z "$line" ]; then fail "$name logs the memory check" "$(tail -5 "$work/$name.log")"; return 1; fi
  local error
  error="$(echo "$line" | sed -n 's/.*, \([-+][0-9.]*\)%$/\1/p')"
  echo "$name: $line"
  "$py" -c "import sys; sys.exit(0 if abs(float(sys.argv[1])) <= 10.0 else 1)" "$error" \
    || fail "$name: measured within 10% of the plan" "$line"
}

for length in 512 1024 2048; do
  for mode in none selective full; do
    check "L$length-$mode" 1 --set "data.train=$work/len$length.jsonl" --set "train.recompute=$mode"
  done
done
check "bf16-L1024" 1 --set "data.train=$work/len1024.jsonl" --set model.dtype=bfloat16
# One rank, bf16: a budget just under the plan with every weight copy kept through the step (but
# over the plan without): the run makes the copies at every acquire instead, says so, and the
# leaner plan holds for the resident set too.
keep_json="$("$bin/odc-train" "${common[@]}" --set model.dtype=bfloat16 --set data.max_tokens_per_microbatch=1024 \
             --set train.memory_budget_gib=100 --plan-memory | tail -1)"
tight="$("$py" -c 'import json, sys; p = json.loads(sys.argv[1]); print((p["peak_bytes"] - 2**20) / 2**30)' "$keep_json")"
check "bf16-L1024-tight" 1 --set "data.train=$work/len1024.jsonl" --set model.dtype=bfloat16 \
      --set "train.memory_budget_gib=$tight"
grep -q "the weights' compute copies are made at every acquire" "$work/bf16-L1024-tight.log" \
  || fail "a tight budget drops the kept weight copies, saying so" "$(grep memory "$work/bf16-L1024-tight.log")"
check "odc-local2-L1024" local2 --set "data.train=$work/len1024.jsonl" --set train.recompute=selective
check "collective-mpi2-L1024" 2 --set "data.train=$work/len1024.jsonl" --set train.comm=collective
# From model.checkpoint: a Qwen2-structured model (tied embeddings, q/k/v biases; 26M parameters in
# f32) on 64-token sequences, where the weights are most of what a rank holds. The load fills the
# store and leaves nothing behind: were the file's pages kept resident while the store's state is
# already touched, the peak would be the state plus the file (+17% over the plan at 1 rank), not
# the state plus the step's buffers. At 1 rank and at 2.
"$bin/odc-ckpt" init --out "$work/qwen2" --dtype f32 --architecture Qwen2ForCausalLM --set model.config.vocab_size=16384 \
  --set model.config.hidden_size=512 --set model.config.intermediate_size=1536 --set model.config.num_hidden_layers=6 \
  --set model.config.num_attention_heads=8 --set model.config.num_key_value_heads=2 \
  --set model.config.max_position_embeddings=4096 --set model.config.tie_word_embeddings=true \
  --set model.config.attention_bias=true > "$work/qwen2-init.log" 2>&1 || fail "odc-ckpt init" "$(cat "$work/qwen2-init.log")"
PYTHONPATH="$root/tests/helpers" "$py" - "$work/qwen2-len64.jsonl" <<'EOF'
import random, sys
from synthetic_data import random_record, write_jsonl
rng = random.Random(64)
write_jsonl(sys.argv[1], [random_record(rng, 16384, 64) for _ in range(4)])
EOF
model_common=("${common[@]}")
common=(--set "model.checkpoint=$work/qwen2" "${common[@]:2}")
check "checkpoint-L64" 1 --set "data.train=$work/qwen2-len64.jsonl"
check "checkpoint-local2-L64" local2 --set "data.train=$work/qwen2-len64.jsonl"
common=("${model_common[@]}")

# auto: the largest multiple of 256 tokens that fits 0.25 GiB; the plan at 256 more does not fit.
plan_json() { "$bin/odc-train" "${common[@]}" --set "data.train=$work/len512.jsonl" --plan-memory "$@" | tail -1; }
auto_json="$(plan_json --set data.max_tokens_per_microbatch=auto --set train.memory_budget_gib=0.25)"
auto_cap="$(echo "$auto_json" | "$py" -c 'import json, sys; p = json.load(sys.stdin); print(p["tokens"] if p["fits"] else -1)')"
if [ "${auto_cap:--1}" -le 0 ]; then
  fail "auto finds a cap that fits" "$auto_json"
else
  over_json="$(plan_json --set "data.max_tokens_per_microbatch=$((auto_cap + 256))" --set train.memory_budget_gib=0.25)"
  echo "$over_json" | "$py" -c 'import json, sys; sys.exit(1 if json.load(sys.stdin)["fits"] else 0)' \
    || fail "auto is the largest cap that fits (256 more tokens do not)" "$over_json"
  echo "auto at 0.25 GiB: $auto_cap tokens"
  # The run takes that cap, says so, and stays inside the budget.
  check "auto-run" 1 --set "data.train=$work/len1024.jsonl" --set data.max_tokens_per_microbatch=auto \
        --set train.memory_budget_gib=0.25
  grep -q "microbatch cap $auto_cap tokens" "$work/auto-run.log" \
    || fail "the auto run trains with the planned cap $auto_cap" "$(grep 'data:' "$work/auto-run.log")"
  grep -q "data.max_tokens_per_microbatch: auto" "$work/auto-run.log" \
    || fail "the auto run names where its cap comes from" "$(grep 'memory:' "$work/auto-run.log")"
  measured="$(grep -o 'measured [0-9.]* MiB' "$work/auto-run.log" | grep -o '[0-9.]*' | head -1)"
  "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 0.25 * 1024 * 1.1 else 1)" "${measured:-1e9}" \
    || fail "the auto run stays inside its budget (+10%)" "measured ${measured:-?} MiB of 256 MiB"
  # A sequence longer than the auto cap: refused, naming auto.
  out="$("$bin/odc-train" "${common[@]}" --set "data.train=$work/len3000.jsonl" --set data.max_tokens_per_microbatch=auto \
         --set train.memory_budget_gib=0.25 2>&1)"
  [ $? -eq 1 ] && echo "$out" | grep -q "exceeds the microbatch cap.*auto: the most the memory plan fits" \
    || fail "a sequence longer than the auto cap is refused, naming auto" "$out"
fi

# A cap the budget cannot hold: refused before training, with the table; no checkpoint.
out="$("$bin/odc-train" "${common[@]}" --set "data.train=$work/len2048.jsonl" --set train.memory_budget_gib=0.2 \
       --set "checkpoint.dir=$work/refused-ckpt" 2>&1)"
status=$?
if [ $status -ne 1 ] || ! echo "$out" | grep -q "the memory plan needs .* per rank but the budget is 204.8 MiB (train.memory_budget_gib)" \
   || ! echo "$out" | grep -q "activations .*layer inputs" || ! echo "$out" | grep -q "train.recompute: full"; then
  fail "a plan over the budget is refused with its table and the fixes (exit 1)" "status $status: $out"
fi
[ -z "$(find "$work/refused-ckpt" -name '*.safetensors' 2>/dev/null)" ] || fail "the refused run wrote no checkpoint" \
  "$(find "$work/refused-ckpt")"

# --plan-memory: exit 1 when it does not fit; a GPU node planned from here (no GPU needed).
"$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=2048 --set train.memory_budget_gib=0.2 \
  --plan-memory > "$work/plan-over.txt" 2>&1
[ $? -eq 1 ] && grep -q "does NOT fit" "$work/plan-over.txt" || fail "--plan-memory exits 1 when over" "$(cat "$work/plan-over.txt")"
gpu="$("$bin/odc-train" "${common[@]}" --set model.device=cuda --set model.dtype=bfloat16 \
       --set data.max_tokens_per_microbatch=65536 --set train.recompute=full --plan-memory --plan-ranks 8 \
       --set train.memory_budget_gib=80 2>&1)"
[ $? -eq 0 ] && echo "$gpu" | grep -q "host staging of the state" && echo "$gpu" | grep -q "fits:" \
  || fail "--plan-memory plans a GPU node without a GPU" "$gpu"
out="$("$bin/odc-train" "${common[@]}" --plan-memory 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -q -- "--plan-memory: data.max_tokens_per_microbatch is 0 (the longest sequence of the data): set the number of tokens to plan for" \
  || fail "--plan-memory without a cap asks for one" "$out"
out="$("$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=lots --plan-memory 2>&1)"
[ $? -eq 1 ] && echo "$out" | grep -q "expects an integer or auto, found 'lots'" \
  || fail "a word other than auto is refused" "$out"

# --plan-ranks beyond an int was truncated (4294967297 planned one rank: "fits", exit 0); alone,
# without --plan-memory, it and --plan-device / --device-profile were ignored and the job trained.
out="$("$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=2048 --set train.memory_budget_gib=80 \
       --plan-memory --plan-ranks 4294967297 2>&1)"
[ $? -eq 2 ] && echo "$out" | grep -qF -- "--plan-ranks must be <= 2147483647, got 4294967297" \
  || fail "--plan-ranks beyond an int is a usage error" "$out"
for option in "--plan-ranks 4" "--plan-device h200" "--device-profile p.json"; do
  # shellcheck disable=SC2086  # the option and its value are two words
  out="$("$bin/odc-train" "${common[@]}" $option 2>&1)"
  [ $? -eq 2 ] && echo "$out" | grep -qF -- "${option%% *} applies only with --plan-memory, which is not given" \
    || fail "$option without --plan-memory is a usage error" "$out"
done
# train.memory_budget_gib beyond any machine overflowed the bytes ("a budget of -8796093022208 MiB").
for budget in 8.6e9 1e30; do
  out="$("$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=2048 \
         --set "train.memory_budget_gib=$budget" --plan-memory 2>&1)"
  [ $? -eq 1 ] && echo "$out" | grep -qF "train.memory_budget_gib" && echo "$out" | grep -qF "1048576" \
    && ! echo "$out" | grep -q -- "-[0-9]* MiB" || fail "train.memory_budget_gib=$budget is refused naming the range" "$out"
done
# A positive budget below 1 MiB rounded to 0 bytes: "no budget" (exit 0) and "nothing checked" in a run.
for budget in 1e-10 1e-30 0.0009; do
  out="$("$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=2048 \
         --set "train.memory_budget_gib=$budget" --plan-memory 2>&1)"
  [ $? -eq 1 ] && echo "$out" | grep -qF "config key 'train.memory_budget_gib' in --set must be 0 (what the device has) or in [0.0009765625, 1048576]" \
    && ! echo "$out" | grep -q "no budget" || fail "train.memory_budget_gib=$budget (below 1 MiB) is refused naming the key" "$out"
done
out="$("$bin/odc-train" "${common[@]}" --set data.max_tokens_per_microbatch=2048 \
       --set train.memory_budget_gib=1048576 --plan-memory 2>&1)"
[ $? -eq 0 ] && echo "$out" | grep -qF "fits: " && echo "$out" | grep -qF "of a budget of 1073741824.0 MiB" \
  || fail "the largest budget (1 PiB) is taken as it is" "$out"

finish_test "memory plan: all checks passed"

#!/usr/bin/env bash
# odc-train with train.objective grpo on rollout records (data.format rollouts): the same losses on
# 1 rank, 2 ranks ODC and 2 ranks collective (the objective's weights are global, so the split does
# not change the sum), the policy diagnostics in the metrics, and every misconfiguration refused
# before training with a message naming the key. Usage: test_grpo.sh BIN_DIR WORK_DIR
set -uo pipefail
bin="$(cd "$1" && pwd)"
work="$2"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
failures=0
fail() { echo "FAIL [$1]"; echo "$2" | sed 's/^/    /'; failures=$((failures + 1)); }

# 16 prompts x 4 completions of skewed lengths, rewards in groups, sampling and reference
# log-probabilities around the uniform policy's (-log 64 = -4.16).
/usr/bin/python3 - "$work" <<'PY'
import json, math, random, sys
rng = random.Random(3)
with open(sys.argv[1] + "/rollouts.jsonl", "w") as f, open(sys.argv[1] + "/norefs.jsonl", "w") as g:
    for p in range(16):
        prompt = [rng.randrange(4, 64) for _ in range(rng.randrange(3, 12))]
        for _ in range(4):
            n = min(int(rng.lognormvariate(2.5, 0.8)) + 1, 96)
            completion = [rng.randrange(4, 64) for _ in range(n)]
            logprobs = [min(-math.log(64) + rng.gauss(0, 0.3), -1e-3) for _ in range(n)]
            record = {"prompt_ids": prompt, "completion_ids": completion, "logprobs": logprobs,
                      "reward": float(rng.random() < 0.4), "group": p}
            g.write(json.dumps(record) + "\n")
            record["ref_logprobs"] = [min(-math.log(64) + rng.gauss(0, 0.3), -1e-3) for _ in range(n)]
            f.write(json.dumps(record) + "\n")
PY
small=(--set "model.config={vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"
       --set "data.train=$work/rollouts.jsonl" --set data.format=rollouts --set train.objective=grpo
       --set data.global_batch_size=16 --set data.max_tokens_per_microbatch=160 --set train.steps=3
       --set rl.kl_beta=0.05 --set rl.loss_aggregation=grpo --set train.log_level=warn)
mpirun=(mpirun --oversubscribe --bind-to none)

run() {  # NAME RANKS ARGS...: trains, metrics into $work/NAME-{rank}.jsonl
  local name=$1 ranks=$2; shift 2
  local out
  if ! out=$(timeout 180 "${mpirun[@]}" -np "$ranks" "$bin/odc-train" "${small[@]}" \
               --set "train.metrics_file=$work/$name-{rank}.jsonl" "$@" 2>&1); then
    fail "$name" "$out"
    return 1
  fi
}
run one 1 && run odc 2 --set train.comm=odc && run collective 2 --set train.comm=collective
if [ -f "$work/one-0.jsonl" ] && [ -f "$work/odc-0.jsonl" ] && [ -f "$work/collective-0.jsonl" ]; then
  # Losses: 1e-5 relative (fp32, only the summation order differs between the splits); the policy
  # diagnostics present and in range.
  if out=$(/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
runs = {n: [json.loads(l) for l in open(f"{work}/{n}-0.jsonl")] for n in ("one", "odc", "collective")}
bad = []
for step in range(3):
    ref = runs["one"][step]
    for name in ("odc", "collective"):
        rec = runs[name][step]
        for key in ("loss", "grad_norm"):
            if abs(rec[key] - ref[key]) > 1e-5 * abs(ref[key]) + 1e-8:
                bad.append(f"step {step + 1} {key}: {name} {rec[key]!r} vs 1 rank {ref[key]!r}")
    p = ref["policy"]
    if not (0 < p["entropy"] <= 4.16 + 1e-3 and p["kl"] > 0 and 0 <= p["clip_low"] <= 1 and 0 <= p["clip_high"] <= 1
            and p["ratio_min"] <= p["ratio_mean"] <= p["ratio_max"]):
        bad.append(f"step {step + 1}: policy metrics out of range: {p}")
print("\n".join(bad) if bad else f"losses {[round(r['loss'], 6) for r in runs['one']]}, "
      f"step 1 policy {runs['one'][0]['policy']}")
sys.exit(1 if bad else 0)
PY
  ); then
    echo "ok   [grpo: 1 rank = 2 ranks ODC = 2 ranks collective; $out]"
  else
    fail "grpo losses across comms" "$out"
  fi
fi

# refuse NAME NEEDLE ARGS...: odc-train must exit 1 before training, saying NEEDLE.
refuse() {
  local name=$1 needle=$2; shift 2
  local out rc
  out=$(timeout 60 "$bin/odc-train" "${small[@]}" "$@" 2>&1); rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$needle" <<<"$out"; then
    fail "$name" "exit $rc, expected 1 with '$needle':"$'\n'"$out"
    return
  fi
  echo "ok   [$name] $(grep -m1 -F -- "$needle" <<<"$out" | head -c 200)"
}
refuse "grpo on supervised data" "train.objective grpo trains on rollouts" --set data.format=tokens
refuse "rollouts without grpo" "which train.objective sft does not use" --set train.objective=sft
refuse "an rl key without grpo" "rl.epsilon (from --set) shapes only train.objective grpo" --set train.objective=sft \
  --set data.format=tokens --set rl.epsilon=0.3
refuse "a KL penalty without reference log-probabilities" "carry no \"ref_logprobs\"" \
  --set "data.train=$work/norefs.jsonl"
refuse "dr_grpo with a short max_completion_length" "rl.max_completion_length = 8 is shorter than the longest" \
  --set rl.loss_aggregation=dr_grpo --set rl.max_completion_length=8
refuse "loss_reduction under grpo" "under train.objective grpo the tokens are weighed by rl.loss_aggregation" \
  --set train.loss_reduction=sequence

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all grpo CLI checks passed"

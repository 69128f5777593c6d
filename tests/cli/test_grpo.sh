#!/usr/bin/env bash
# odc-train with train.objective grpo on rollout records (data.format rollouts): the same losses on
# 1 rank, 2 ranks ODC and 2 ranks collective (the objective's weights are global, so the split does
# not change the sum), the policy diagnostics in the metrics, every misconfiguration refused
# before training with a message naming the key, and rewards that trained nothing (a group of one,
# equal rewards, rewards whose squares overflow) refused, warned of or trained as scaled ones.
# Usage: test_grpo.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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
# Rollouts whose completions are all empty have no targets; rollouts have no loss_mask (it said
# "every loss_mask is 0").
for g in 0 0 1 1; do
  printf '{"prompt_ids": [5, 6, 7], "completion_ids": [], "logprobs": [], "reward": %s, "group": %s}\n' "$g" "$g"
done >"$work/empty.jsonl"
refuse "rollouts with empty completions" "has no target tokens in its 4 sequences (every completion_ids is empty: a rollout's targets are its completion's tokens): nothing to train on; give the rollouts their completions (completion_ids)" \
  --set "data.train=$work/empty.jsonl" --set rl.kl_beta=0 --set data.global_batch_size=4


# Rewards that once trained nothing with exit 0: a group of one (advantage 0), every group's rewards
# equal (every advantage 0: a warning, once), rewards whose squares overflow (std inf, advantages 0).
/usr/bin/python3 - "$work" <<'PY'
import json, sys
def write(name, rewards, groups):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for i, (r, g) in enumerate(zip(rewards, groups)):
            f.write(json.dumps({"prompt_ids": [5, 6, 7], "completion_ids": [8 + i % 50, 9], "logprobs": [-4.0, -4.2],
                                "ref_logprobs": [-4.1, -4.1], "reward": r, "group": g}) + "\n")
write("lone", [1, 0] * 8, list(range(16)))
write("equal", [g % 2 for g in range(16) for _ in range(4)][:16], [g for g in range(4) for _ in range(4)])
write("mixed", [1] * 8 + [1, 0] * 4, [i // 4 for i in range(16)])  # groups 0-1 equal, 2-3 not
write("huge", [1e200, 0] * 8, [i // 4 for i in range(16)])
write("small", [1, 0] * 8, [i // 4 for i in range(16)])
PY
refuse "a group of one record" "lone.jsonl:1: group 0 has this record alone" --set "data.train=$work/lone.jsonl"
if out=$(timeout 60 "$bin/odc-train" "${small[@]}" --set "data.train=$work/equal.jsonl" --set train.steps=2 2>&1) &&
   [ "$(grep -c "every advantage is 0 (the rewards of each group are equal)" <<<"$out")" -eq 1 ]; then
  echo "ok   [every advantage 0: warned once]"
else
  fail "every advantage 0: one warning" "$out"
fi
# Without shuffling, step 1's minibatch is groups 0-1 (equal rewards), step 2's groups 2-3.
if out=$(timeout 60 "$bin/odc-train" "${small[@]}" --set "data.train=$work/mixed.jsonl" --set data.global_batch_size=8 \
           --set data.shuffle=false --set train.steps=2 2>&1) &&
   [ "$(grep -c "every advantage is 0" <<<"$out")" -eq 1 ] && grep -q "step 1: every advantage is 0" <<<"$out"; then
  echo "ok   [one minibatch's advantages 0: step 1 warned]"
else
  fail "one minibatch's advantages 0" "$out"
fi
for name in huge small; do
  run "$name" 1 --set "data.train=$work/$name.jsonl" --set train.steps=1 --set rl.kl_beta=0 || true
done
if [ -f "$work/huge-0.jsonl" ] && [ -f "$work/small-0.jsonl" ] &&
   out=$(/usr/bin/python3 - "$work" <<'PY'
import json, sys
huge, small = (json.loads(open(f"{sys.argv[1]}/{n}-0.jsonl").readline()) for n in ("huge", "small"))
# Rewards 1e200 and 0 are rewards 1 and 0 scaled: advantages 0.5 / (std + 1e-4) on the small ones,
# 0.5 / std on the huge (the 1e-4 vanishes beside 1e200), std = sqrt(1/3) in both groups of 1, 0, 1, 0;
# with the KL off the loss is linear in the advantages, so the ratio is (std + 1e-4) / std, to fp32
# summation (1e-6).
s = (1 / 3) ** 0.5
ratio = huge["loss"] / small["loss"]
ok = abs(ratio - (s + 1e-4) / s) < 1e-6
print(f"loss {huge['loss']} (rewards 1e200, 0) / {small['loss']} (1, 0) = {ratio:.7f}, expected {(s + 1e-4) / s:.7f}")
sys.exit(0 if ok else 1)
PY
   ); then
  echo "ok   [huge rewards: $out]"
else
  fail "huge rewards train as small ones" "${out:-a metrics file is missing}"
fi

finish_test "all grpo CLI checks passed"

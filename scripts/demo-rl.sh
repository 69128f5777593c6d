#!/usr/bin/env bash
# RL after SFT on the demo's verifiable string tasks (reverse, repeat, sort, add), on the CPU: a small
# LLaMA-style model is fine-tuned only part of the way (scripts/demo.sh's data and config, fewer
# steps), then GRPO iterations raise its held-out accuracy: one odc-train run of the online loop
# (rl.prompts) on 2 ranks with ODC (lb_mini_equal, the paper's RL balance). Each iteration samples G
# completions of the next training prompts with the ranks' current weights, scores them by exact
# match against the answer, and trains on them; odc-rollout measures the held-out accuracy.
# Prints the held-out accuracy before and after (sampled completions, 4 per prompt, at temperature
# 1), writes OUT/rl-curve.jsonl (per iteration: reward mean, accuracy, completion length, seconds;
# from the run's metrics, OUT/rl-metrics.jsonl)
# and OUT/rl-curve.png.
# Usage: scripts/demo-rl.sh [ITERATIONS]   (env: ODC_DEMO_RL_DIR, ODC_BUILD_DIR, ODC_DEMO_RL_SFT_STEPS)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"
out="${ODC_DEMO_RL_DIR:-$root/demo-rl-out}"
iterations="${1:-30}"
sft_steps="${ODC_DEMO_RL_SFT_STEPS:-300}"
lr="${ODC_DEMO_RL_LR:-1e-4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

[ -x "$build/bin/odc-rollout" ] || "$root/scripts/build.sh"
mkdir -p "$out"
start=$(date +%s)
summary=$(/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$out" --num 8000 --seed 1)
vocab=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["vocab_size"])' "$summary")
"$build/bin/odc-ckpt" init --out "$out/base" --set model.config.vocab_size="$vocab" --dtype f32 \
  --tokenizer "$out/tokenizer" --seed 0 >/dev/null
# Prompts with answers: training prompts for the rollouts, held-out ones for the accuracy.
/usr/bin/python3 - "$root/tools/make_demo_chat.py" "$out" <<'PY'
import importlib.util, json, random, sys
spec = importlib.util.spec_from_file_location("demo", sys.argv[1])
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
for name, seed, count in (("prompts-train", 21, 4096), ("prompts-heldout", 22, 200)):
    rng = random.Random(seed)
    with open(f"{sys.argv[2]}/{name}.jsonl", "w") as f:
        for _ in range(count):
            messages = demo.conversation(rng)
            f.write(json.dumps({"prompt": messages[-2]["content"], "answer": messages[-1]["content"]}) + "\n")
PY

echo "== SFT for $sft_steps steps (part of the way) =="
"$build/bin/odc-run" -np 2 --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo-chat.yaml" \
  --set model.checkpoint="$out/base" --set data.train="$out/chat.jsonl" --set train.steps="$sft_steps" \
  --set train.log_every=50 --set checkpoint.export_hf="$out/policy-0" --set checkpoint.export_dtype=float32 \
  >"$out/sft.log" 2>&1 || { cat "$out/sft.log"; exit 1; }
grep -h "done:" "$out/sft.log" | sed 's/.*done: /SFT: /' | cut -c1-100

accuracy() {  # MODEL_DIR -> the held-out accuracy (sampled, 4 completions per prompt)
  "$build/bin/odc-rollout" --model "$1" --prompts "$out/prompts-heldout.jsonl" --out "$out/heldout.jsonl" --chat \
    --group 4 --concurrency 64 --max-new-tokens 12 --seed 7 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["accuracy"])'
}
before=$(accuracy "$out/policy-0")
echo "held-out accuracy after SFT: $before"

echo "== GRPO: $iterations iterations of 32 prompts x 8 completions, online in one odc-train run =="
# The online loop: every iteration samples with the ranks' current weights, scores by exact match,
# and trains 4 steps of 64 rollouts; AdamW's state carries over from iteration to iteration.
"$build/bin/odc-run" -np 2 --oversubscribe --bind-to none "$build/bin/odc-train" \
  --set model.checkpoint="$out/policy-0" --set train.objective=grpo --set rl.prompts="$out/prompts-train.jsonl" \
  --set rl.iterations="$iterations" --set rl.prompts_per_iteration=32 --set rl.group_size=8 --set rl.chat=true \
  --set rl.max_new_tokens=12 --set rl.concurrency=64 --set rl.verifier=exact --set train.comm=odc \
  --set data.balance=lb_mini_equal --set data.global_batch_size=64 --set data.seed=1 --set train.lr="$lr" \
  --set train.schedule=constant --set train.warmup_steps=0 --set train.grad_clip=1.0 --set train.log_every=20 \
  --set train.metrics_file="$out/rl-metrics.jsonl" --set checkpoint.export_hf="$out/policy-rl" \
  --set checkpoint.export_dtype=float32 >"$out/grpo.log" 2>&1 || { cat "$out/grpo.log"; exit 1; }
grep -h "\] iteration " "$out/grpo.log" | sed 's/.*\] iteration/iteration/' | cut -c1-90
/usr/bin/python3 -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if "reward_mean" in r:
            f.write(json.dumps({k: r[k] for k in ("iteration", "reward_mean", "accuracy", "completion_tokens_mean", "rollout_s")}) + "\n")
' "$out/rl-metrics.jsonl" "$out/rl-curve.jsonl"
after=$(accuracy "$out/policy-rl")
echo "held-out accuracy: $before after SFT -> $after after $iterations GRPO iterations ($(( $(date +%s) - start )) s in all)"
/usr/bin/python3 - "$out" "$before" "$after" <<'PY'
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, before, after = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
curve = [json.loads(l) for l in open(f"{out}/rl-curve.jsonl")]
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot([c["iteration"] for c in curve], [c["reward_mean"] for c in curve], marker="o")
ax[0].set(xlabel="GRPO iteration", ylabel="mean reward (training prompts)", title="reward")
ax[1].bar(["after SFT", "after GRPO"], [before, after], color=["grey", "tab:blue"])
ax[1].set(ylabel="held-out accuracy (sampled)", ylim=(0, 1), title="held-out accuracy")
fig.tight_layout()
fig.savefig(f"{out}/rl-curve.png", dpi=100)
print(f"wrote {out}/rl-curve.png")
PY

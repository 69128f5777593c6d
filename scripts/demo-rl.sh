#!/usr/bin/env bash
# RL after SFT on the demo's verifiable string tasks (reverse, repeat, sort, length), on the CPU: a
# small LLaMA-style model is fine-tuned only part of the way (scripts/demo.sh's data and config, 300
# of its 1000 steps), then GRPO iterations raise its held-out accuracy: one odc-train run of the
# online loop (rl.prompts) on 2 ranks with ODC (lb_mini_equal, the paper's RL balance). Each
# iteration samples G completions of the next training prompts with the ranks' current weights,
# scores them by exact match against the answer, and trains on them; tools/demo_accuracy.py
# measures the held-out accuracy (200 fresh prompts, 4 completions each sampled at temperature 1,
# as the rollouts are) before and after, overall and per task. Writes OUT/rl-curve.jsonl (per
# iteration: reward mean, accuracy, completion length, seconds; from the run's metrics,
# OUT/rl-metrics.jsonl) and OUT/rl-curve.png.
# Usage: scripts/demo-rl.sh [ITERATIONS]   (env: ODC_DEMO_RL_DIR, ODC_BUILD_DIR, ODC_DEMO_RL_SFT_STEPS,
# ODC_DEMO_RL_LR)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ODC_BUILD_DIR:-$root/build}"
out="${ODC_DEMO_RL_DIR:-$root/demo-rl-out}"
iterations="${1:-50}"
sft_steps="${ODC_DEMO_RL_SFT_STEPS:-300}"
lr="${ODC_DEMO_RL_LR:-5e-4}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

[ -x "$build/bin/odc-rollout" ] || "$root/scripts/build.sh"
mkdir -p "$out"
start=$(date +%s)
# Prompts with answers: training prompts for the rollouts, held-out ones for the accuracy.
summary=$(/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$out" --num 8000 --seed 1 --prompts 4096 --heldout 200)
vocab=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["vocab_size"])' "$summary")
"$build/bin/odc-ckpt" init --out "$out/base" --set model.config.vocab_size="$vocab" --dtype f32 \
  --tokenizer "$out/tokenizer" --seed 0 >/dev/null

echo "== SFT for $sft_steps steps (part of the way) =="
"$build/bin/odc-run" -np 2 --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo-chat.yaml" \
  --set model.checkpoint="$out/base" --set data.train="$out/chat.jsonl" --set train.steps="$sft_steps" \
  --set train.log_every=50 --set checkpoint.export_hf="$out/policy-0" --set checkpoint.export_dtype=float32 \
  >"$out/sft.log" 2>&1 || { cat "$out/sft.log"; exit 1; }
grep -h "done:" "$out/sft.log" | sed 's/.*done: /SFT: /' | cut -c1-100

accuracy() {  # MODEL_DIR NAME LABEL -> prints the held-out accuracy line; OUT/accuracy-NAME.json holds it
  /usr/bin/python3 "$root/tools/demo_accuracy.py" --build "$build" --model "$1" --prompts "$out/prompts-heldout.jsonl" \
    --out "$out/heldout-$2.jsonl" --sampled 4 --json >"$out/accuracy-$2.json"
  /usr/bin/python3 - "$out/accuracy-$2.json" "$3" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
print(f"held-out accuracy {sys.argv[2]}: {a['accuracy']:.3f} (" + ", ".join(f"{k} {v:.2f}" for k, v in a["per_task"].items())
      + f"; {a['prompts']} prompts x 4 sampled completions)")
PY
}
accuracy "$out/policy-0" sft "after SFT"

echo "== GRPO: $iterations iterations of 64 prompts x 8 completions, online in one odc-train run =="
# The online loop: every iteration samples with the ranks' current weights, scores by exact match,
# and trains one step on its 512 rollouts (on-policy); AdamW's state carries over from iteration
# to iteration. A microbatch packs up to 256 tokens (~16 rollouts), as the SFT config does.
"$build/bin/odc-run" -np 2 --oversubscribe --bind-to none "$build/bin/odc-train" \
  --set model.checkpoint="$out/policy-0" --set train.objective=grpo --set rl.prompts="$out/prompts-train.jsonl" \
  --set rl.iterations="$iterations" --set rl.prompts_per_iteration=64 --set rl.group_size=8 --set rl.chat=true \
  --set rl.max_new_tokens=12 --set rl.concurrency=64 --set rl.verifier=exact --set train.comm=odc \
  --set data.balance=lb_mini_equal --set data.global_batch_size=512 --set data.max_tokens_per_microbatch=256 \
  --set data.seed=1 --set train.lr="$lr" --set train.schedule=constant --set train.warmup_steps=0 \
  --set train.grad_clip=1.0 --set train.log_every=10 --set train.metrics_file="$out/rl-metrics.jsonl" \
  --set checkpoint.export_hf="$out/policy-rl" --set checkpoint.export_dtype=float32 >"$out/grpo.log" 2>&1 \
  || { cat "$out/grpo.log"; exit 1; }
grep -h "\] iteration " "$out/grpo.log" | sed 's/.*\] iteration/iteration/' | cut -c1-90 | awk 'NR % 5 == 0'
/usr/bin/python3 -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if "reward_mean" in r:
            f.write(json.dumps({k: r[k] for k in ("iteration", "reward_mean", "accuracy", "completion_tokens_mean", "rollout_s")}) + "\n")
' "$out/rl-metrics.jsonl" "$out/rl-curve.jsonl"
accuracy "$out/policy-rl" grpo "after $iterations GRPO iterations"
/usr/bin/python3 - "$out" "$iterations" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, iterations, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
before = json.load(open(f"{out}/accuracy-sft.json"))["accuracy"]
after = json.load(open(f"{out}/accuracy-grpo.json"))["accuracy"]
print(f"held-out accuracy: {before:.3f} after SFT -> {after:.3f} after {iterations} GRPO iterations "
      f"({100 * (after - before):+.1f} points; {seconds} s in all)")
curve = [json.loads(l) for l in open(f"{out}/rl-curve.jsonl")]
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
xs, ys = [c["iteration"] for c in curve], [c["reward_mean"] for c in curve]
ax[0].plot(xs, ys, marker="o", ms=3, alpha=0.5, label="per iteration (64 fresh prompts each)")
window = 10  # the trend beyond the prompts' noise: the mean of the last 10 iterations
trend = [sum(ys[max(0, i - window + 1):i + 1]) / len(ys[max(0, i - window + 1):i + 1]) for i in range(len(ys))]
ax[0].plot(xs, trend, color="tab:red", label=f"mean of the last {window}")
ax[0].legend(loc="lower right", fontsize=8)
ax[0].set(xlabel="GRPO iteration", ylabel="mean reward (training prompts)", title="reward")
ax[1].bar(["after SFT", "after GRPO"], [before, after], color=["grey", "tab:blue"])
ax[1].set(ylabel="held-out accuracy (sampled)", ylim=(0, 1), title="held-out accuracy")
fig.tight_layout()
fig.savefig(f"{out}/rl-curve.png", dpi=100)
print(f"wrote {out}/rl-curve.png")
PY

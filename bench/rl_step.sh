#!/usr/bin/env bash
# ODC against the collective baseline on the RL step (train.objective grpo), same model (the demo's),
# same rollouts and steps, 2 ranks with one compute thread each, in one run. The rollouts are
# shaped as GRPO makes them: prompts of one length, G completions per prompt with lengths skewed
# over a wide range (lognormal, as response lengths are), rewards per group. Runs the paper's
# pairings: collective + lb_micro (the strongest FSDP packing), ODC + lb_mini_equal (the paper's RL:
# equal sample counts per rank) and ODC + lb_mini; prints one JSON line per run and a comparison
# line with the throughput ratios, then odc-sim's estimate for the same rollout lengths.
# Usage: bench/rl_step.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-30}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

/usr/bin/python3 - "$work/rollouts.jsonl" <<'PY'
import json, math, random, sys
rng = random.Random(11)
with open(sys.argv[1], "w") as f:
    for p in range(256):  # 16 steps of 16 prompts x 8 completions would repeat; the sampler cycles
        prompt = [rng.randrange(2, 32) for _ in range(48)]
        for _ in range(8):
            n = max(4, min(int(rng.lognormvariate(math.log(120), 0.9)), 1024))
            f.write(json.dumps({"prompt_ids": prompt, "completion_ids": [rng.randrange(2, 32) for _ in range(n)],
                                "logprobs": [round(-math.log(32) + rng.gauss(0, 0.2), 4) for _ in range(n)],
                                "reward": float(rng.random() < 0.3), "group": p}) + "\n")
PY
run() {  # NAME COMM BALANCE
  mpirun -np 2 --bind-to none "$build/bin/odc-train" "$root/configs/demo.yaml" --set "data.train=$work/rollouts.jsonl" \
    --set data.format=rollouts --set train.objective=grpo --set data.minibatch_size=16 \
    --set data.max_tokens_per_microbatch=2048 --set train.steps="$steps" --set train.comm="$2" --set data.balance="$3" \
    --set train.warmup_steps=2 --set train.log_level=warn --set "train.metrics_file=$work/$1-{rank}.jsonl"
}
run collective_lb_micro collective lb_micro
run odc_lb_mini_equal odc lb_mini_equal
run odc_lb_mini odc lb_mini
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
out = {}
for name in ("collective_lb_micro", "odc_lb_mini_equal", "odc_lb_mini"):
    ranks = [[json.loads(l) for l in open(f"{work}/{name}-{r}.jsonl")] for r in (0, 1)]
    warm = [recs[3:] for recs in ranks]  # the first steps grow buffers
    time = max(sum(x["step_time_s"] for x in recs) for recs in warm)
    samples = sum(x["sequences"] for x in warm[0])
    rec = {"bench": "rl_step", "run": name, "ranks": 2, "steps_timed": len(warm[0]),
           "samples_per_s": round(samples / time, 3), "tokens_per_s": round(sum(x["tokens"] for x in warm[0]) / time, 1),
           "bubble_measured": round(sum(x["bubble_measured"] for x in warm[0]) / len(warm[0]), 4),
           "bubble_planned": round(sum(x["bubble_planned"] for x in warm[0]) / len(warm[0]), 4),
           "final_loss": ranks[0][-1]["loss"]}
    out[name] = rec
    print(json.dumps(rec))
base = out["collective_lb_micro"]["samples_per_s"]
print(json.dumps({"bench": "rl_step", "comparison": "odc/collective",
                  "lb_mini_equal_ratio": round(out["odc_lb_mini_equal"]["samples_per_s"] / base, 3),
                  "lb_mini_ratio": round(out["odc_lb_mini"]["samples_per_s"] / base, 3)}))
PY
# odc-sim on the same rollout lengths (the paper's cost fit; a CPU pair is not a GPU pair, so this is
# the planner's view of the same data, for comparison with the measured ratios above).
"$build/bin/odc-sim" --set "data.lengths=$work/rollouts.jsonl" --set data.format=rollouts \
  --set data.minibatch_size=16 --set sim.devices=2 2>&1 | tail -12 || true

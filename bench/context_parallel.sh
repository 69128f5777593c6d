#!/usr/bin/env bash
# Context parallelism on the CPU: 4 ranks x 1 compute thread train the same long-tailed data (many
# short sequences, a few longer than the microbatch cap) three ways, side by side in one run:
#   odc_dynamic      train.comm odc: each long sequence split over the fewest ranks whose share fits
#                    the cap, groups chosen per minibatch by the planner (include/odc/data/context_groups.h)
#   collective_static train.comm collective, train.context_parallel_degree 0 (auto: the fewest ranks
#                    dividing 4 whose share fits the longest sequence): every microbatch of every
#                    sequence split over static groups of that many consecutive ranks
#   odc_drop         train.comm odc with data.max_length = the cap, data.over_length drop: the long
#                    sequences left out (what a run without context parallelism can do)
# Prints one JSON line per run, then ONE summary line with each cell's tokens/s, measured bubble and
# in-loop wait, the ratios odc_dynamic / collective_static and odc_dynamic / odc_drop, and odc-sim's
# prediction of the same three cells, calibrated on odc_dynamic's own trace (sim.device calibrated).
# The key/value exchange's time is reported per rank when the metrics carry context_exchange_s (a
# trainer that times it); otherwise it is inside compute_s (a member waiting for its group's keys
# is in neither the gather nor the push wait) and the summary says so.
# 4 ranks on a 2-core machine share the cores (mpirun --oversubscribe): the absolute rates are of a
# time-shared machine; the three cells share it alike. About 2 minutes on 2 cores (60 steps).
# Usage: bench/context_parallel.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-60}"
warm=5     # steps left out of the rates: the first ones grow buffers and fault pages in
cap=512    # data.max_tokens_per_microbatch; the long sequences are 1.25-1.95 x it: k = 2
ranks=4
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for p in odc-train odc-data odc-sim; do
  [ -x "$build/bin/$p" ] || { echo "context_parallel.sh: $build/bin/$p not found; build it first" >&2; exit 1; }
done

# The data (odc-data synth: copy/reverse/sort/add records in the trainer's token JSONL): 2000
# sequences of 16-512 tokens (log-normal) and 80 of 640-1012 (over the cap, at most 2 x it): ~4%
# of the sequences, ~20% of the tokens and more of the attention work.
"$build/bin/odc-data" synth --out "$work/short.jsonl" --num 2000 --vocab 32 --min-length 16 --max-length "$cap" \
  --mean-length 128 --sigma 0.8 --seed 1 >/dev/null
"$build/bin/odc-data" synth --out "$work/long.jsonl" --num 80 --vocab 32 --min-length $((cap * 5 / 4)) \
  --max-length $((cap * 2 - 12)) --mean-length $((cap * 3 / 2)) --sigma 0.15 --seed 2 >/dev/null
cat "$work/short.jsonl" "$work/long.jsonl" >"$work/data.jsonl"  # the sampler shuffles (data.shuffle)

# A small model (4 layers, hidden 256, GQA 4/2, head_dim 64): big enough that a step is the
# model's compute (~1 s), not the launch or the per-microbatch overheads.
shape=(--set model.config.hidden_size=256 --set model.config.intermediate_size=768
       --set model.config.num_hidden_layers=4 --set model.config.num_attention_heads=4
       --set model.config.num_key_value_heads=2)
run() {  # NAME SETS...
  local name=$1
  shift
  mpirun -np "$ranks" --oversubscribe --bind-to none "$build/bin/odc-train" "$root/configs/demo.yaml" \
    --set "data.train=$work/data.jsonl" "${shape[@]}" --set data.minibatch_size=8 \
    --set data.max_tokens_per_microbatch="$cap" --set train.steps="$steps" --set train.warmup_steps=2 \
    --set train.threads=1 --set train.log_level=warn --set "train.metrics_file=$work/$name-{rank}.jsonl" "$@"
}
# Rank 0's trace of the first steps (its compute events: tokens and attention pairs per unit and
# phase) calibrates odc-sim below.
run odc_dynamic --set train.comm=odc --set train.context_parallel=auto --set "train.trace_file=$work/trace.json" \
  --set train.trace_steps="$steps"
run collective_static --set train.comm=collective --set train.context_parallel=auto --set train.context_parallel_degree=0
run odc_drop --set train.comm=odc --set data.max_length="$cap" --set data.over_length=drop

# odc-sim, the same minibatches (same data file, seed and minibatch size; the warm-up steps drawn
# and skipped), per-unit compute fitted from the trace; fp32 activations on the CPU: 4-byte keys.
sim() {  # OUT SETS...
  local out=$1
  shift
  "$build/bin/odc-sim" --set "data.lengths=$work/data.jsonl" --set data.format=tokens "${shape[@]}" \
    --set model.config.vocab_size=32 --set data.minibatch_size=8 --set data.max_tokens_per_microbatch="$cap" \
    --set sim.devices="$ranks" --set sim.device=calibrated --set "sim.calibration=$work/trace.json" \
    --set sim.minibatches=$((steps - warm)) --set sim.skip_minibatches="$warm" --set sim.activation_bytes=4 "$@" \
    >"$out" 2>"$out.err" || { echo "context_parallel.sh: odc-sim failed: $(tail -3 "$out.err")" >&2; return 0; }
}
sim "$work/sim-cp.jsonl" --set data.max_length=0 --set sim.context_parallel=true \
  --set sim.methods=odc+lb_mini,collective+lb_micro --set sim.baseline=collective+lb_micro
sim "$work/sim-drop.jsonl" --set data.max_length="$cap" --set data.over_length=drop \
  --set sim.methods=odc+lb_mini --set sim.baseline=odc+lb_mini

/usr/bin/python3 - "$work" "$ranks" "$warm" "$cap" <<'PY'
import json, sys
work, ranks, warm, cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = ("odc_dynamic", "collective_static", "odc_drop")


def records(path):
    return [r for r in (json.loads(l) for l in open(path) if l.strip()) if "loss" in r]


cells = {}
for name in names:
    per_rank = [records(f"{work}/{name}-{r}.jsonl")[warm:] for r in range(ranks)]
    # A step ends when its slowest rank does: the run's time is the largest rank's sum.
    time = max(sum(x["step_time_s"] for x in recs) for recs in per_rank)
    mean = lambda key: sum(x[key] for x in per_rank[0]) / len(per_rank[0])
    cell = {"bench": "context_parallel", "run": name, "ranks": ranks, "cap": cap, "steps_timed": len(per_rank[0]),
            "tokens": sum(x["tokens"] for x in per_rank[0]), "sequences": sum(x["sequences"] for x in per_rank[0]),
            "tokens_per_s": round(sum(x["tokens"] for x in per_rank[0]) / time, 1),
            "bubble_measured": round(mean("bubble_measured"), 4), "bubble_planned": round(mean("bubble_planned"), 4),
            # per rank, summed over the timed steps: gather + push waits, and the minibatch-end barrier
            "wait_in_loop_s": [round(sum(x["wait_in_loop_s"] for x in recs), 3) for recs in per_rank],
            "wait_end_s": [round(sum(x["wait_end_s"] for x in recs), 3) for recs in per_rank],
            "compute_s": [round(sum(x["compute_s"] for x in recs), 3) for recs in per_rank],
            "microbatches": [sum(x["microbatches"] for x in recs) for recs in per_rank],
            # (fields a trainer that times the exchange writes; absent: None)
            "split_microbatches": [sum(x.get("split_microbatches", 0) for x in recs) for recs in per_rank]
            if "split_microbatches" in per_rank[0][0] else None,
            "context_exchange_s": [round(sum(x.get("context_exchange_s", 0) for x in recs), 3) for recs in per_rank]
            if "context_exchange_s" in per_rank[0][0] else None,
            "final_loss": per_rank[0][-1]["loss"]}
    cells[name] = cell
    print(json.dumps(cell))


def sim_rows(path):
    try:
        rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return {}
    return {r["method"]: r for r in rows if "method" in r}


predicted, sim_note = {}, None
cp, drop = sim_rows(f"{work}/sim-cp.jsonl"), sim_rows(f"{work}/sim-drop.jsonl")
for name, rows, method in (("odc_dynamic", cp, "odc+lb_mini"), ("collective_static", cp, "collective+lb_micro"),
                           ("odc_drop", drop, "odc+lb_mini")):
    r = rows.get(method)
    if r is None:
        err = open(f"{work}/sim-{'drop' if name == 'odc_drop' else 'cp'}.jsonl.err").read().strip().splitlines()
        sim_note = f"odc-sim gave no {method} line: {err[-1] if err else 'no output'}"
        continue
    # Simulated tokens/s: the same minibatches' tokens (as the run measured them) / simulated time.
    per_step = cells[name]["tokens"] / cells[name]["steps_timed"]
    predicted[name] = {"method": method, "minibatch_time_s": round(r["minibatch_time_s"], 4),
                       "tokens_per_s": round(per_step / r["minibatch_time_s"], 1),
                       "bubble_simulated": round(r["bubble_simulated"], 4),
                       "exchange_s": round(r["exchange_s"], 4) if "exchange_s" in r else None,
                       "context_parallel": r.get("context_parallel")}
ratio = lambda a, b, key: round(a[key] / b[key], 3) if a.get(key) and b.get(key) else None
summary = {"bench": "context_parallel", "ranks": ranks, "threads_per_rank": 1, "cap": cap,
           "cells": {n: {k: cells[n][k] for k in ("tokens_per_s", "bubble_measured", "wait_in_loop_s", "wait_end_s")}
                     for n in names},
           "ratio_dynamic_vs_static": ratio(cells["odc_dynamic"], cells["collective_static"], "tokens_per_s"),
           "ratio_dynamic_vs_drop": ratio(cells["odc_dynamic"], cells["odc_drop"], "tokens_per_s"),
           "exchange_time": ({n: cells[n]["context_exchange_s"] for n in names}
                             if cells["odc_dynamic"]["context_exchange_s"] is not None
                             else "not measured separately by this trainer (inside compute_s and the waits)")}
if len(predicted) == 3:
    p = predicted
    summary["sim"] = {"cells": p, "ratio_dynamic_vs_static": ratio(p["odc_dynamic"], p["collective_static"], "tokens_per_s"),
                      "ratio_dynamic_vs_drop": ratio(p["odc_dynamic"], p["odc_drop"], "tokens_per_s"),
                      "calibration": "odc_dynamic's rank-0 trace (sim.device calibrated), activation_bytes 4"}
else:
    summary["sim"] = {"cells": predicted, "not_modeled": sim_note}
print(json.dumps(summary))
PY

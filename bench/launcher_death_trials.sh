#!/usr/bin/env bash
# 20 trials (or $3) of kill -9 of odc-run at a random moment (0-4 s after launch), alternating the
# mpirun and --local paths; prints one JSON line: trials where no process of the job was left
# within 20 s of the kill. Not in ctest (about a minute). Usage: launcher_death_trials.sh BIN_DIR WORK_DIR [TRIALS]
set -uo pipefail
bin="$(cd "$1" && pwd)"; work="$2"; trials="${3:-20}"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
"$bin/odc-data" synth --out "$work/data.jsonl" --num 400 --max-length 96 --mean-length 40 --seed 9 >/dev/null
clean=0; worst=0
for n in $(seq 1 "$trials"); do
  if [ $((n % 2)) -eq 0 ]; then launch=(--local 2); else launch=(-np 2 --oversubscribe --bind-to none); fi
  setsid "$bin/odc-run" "${launch[@]}" "$bin/odc-train" --set "data.train=$work/data.jsonl" \
    --set "model.config={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}" \
    --set data.minibatch_size=4 --set train.steps=100000 --set "checkpoint.dir=$work/ckpt-$n" --set checkpoint.every=0 \
    --set train.log_every=1000 >"$work/trial-$n.log" 2>&1 &
  job=$!
  sleep "$(awk -v s="$RANDOM" 'BEGIN { printf "%.2f", (s % 400) / 100 }')"
  kill -KILL "$job"; wait "$job" 2>/dev/null
  t=0
  while [ -n "$(pgrep -f "$work/data.jsonl")" ] && [ "$t" -lt 200 ]; do sleep 0.1; t=$((t + 1)); done
  if [ -z "$(pgrep -f "$work/data.jsonl")" ]; then clean=$((clean + 1)); else pkill -KILL -f "$work/data.jsonl"; fi
  [ "$t" -gt "$worst" ] && worst=$t
done
echo "{\"trials\": $trials, \"nothing_left_within_20s\": $clean, \"slowest_cleanup_s\": $(awk -v t="$worst" 'BEGIN { print t / 10 }')}"

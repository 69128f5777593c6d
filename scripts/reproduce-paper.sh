#!/usr/bin/env bash
# Reproduces the shape of the paper's throughput study with odc-sim (a simulation, not training):
#   1. the main table: every configs/paper/*.yaml setting (3 length distributions x 4 models at
#      their device counts) at 1, 2, 4 and 8 sequences per device, every method against the paper's
#      baseline (collective+ref_lb_micro: Collective with the reference implementation's LB-Micro
#      packing) and beside ours (collective+lb_micro) -> OUT/main.jsonl, OUT/table.md (ODC over both
#      baselines, speedup and bubble per method, each length stand-in's statistics next to the
#      published ones)
#   2. parametric sweeps around the golden setting (1.5B, LongAlign-like, 4 seq/device, 8 devices,
#      packing ratio 1): minibatch size, maximum length (longer sequences dropped, as the reference's
#      dataset filter does), packing ratio, devices; speedups over the paper's baseline (the reference's
#      LB-Micro packing), ours beside it
#      -> OUT/sweeps.jsonl, OUT/sweeps.md, OUT/sweep-*.png
#   3. a timeline of the golden setting's first minibatch -> OUT/timeline-golden.png
#   4. sharding layouts across nodes (the paper's Appendix E: hybrid sharding at 8K): 7B, the
#      SWE-Smith-like stand-in scaled to an 8K maximum (long-tailed, mean 3.6K), 16 devices of 8
#      per node, 4 seq/device, every method under sim.sharding full, hybrid and hpz
#      -> OUT/sharding.jsonl, OUT/sharding.md
#   5. context parallelism: the SWE-Smith-like stand-in with a 128K maximum instead of 64K (nothing
#      dropped below 128K), the microbatch cap kept at 64K, long sequences split over devices:
#      Collective LB-Micro with one static degree vs ODC LB-Mini with dynamic groups, beside ODC with
#      the sequences beyond 64K dropped (today's setting) -> OUT/context.jsonl, OUT/context.md
# Usage: scripts/reproduce-paper.sh [BUILD_DIR (default build)] [OUT_DIR (default paper-out)]
# scripts/paper-sensitivity.sh shows how each modelling choice moves every cell.
# Takes about a minute on 2 cores (simulated minibatches: 800 / minibatch size per setting, 400 per sweep point). Plots need /usr/bin/python3 with matplotlib.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${1:-$root/build}
out_dir=${2:-$PWD/paper-out}
sim="$build_dir/bin/odc-sim"
python=${PYTHON:-/usr/bin/python3}
[ -x "$sim" ] || { echo "reproduce-paper.sh: $sim not found; build first (ninja -C $build_dir odc-sim)" >&2; exit 1; }
mkdir -p "$out_dir"

# --- 1. main table ---
# Both baselines (the paper's: the reference's packing; ours), ODC with the reference's LB-Mini and
# ours; RL also LB-Mini with equal counts per device (verl). The list is passed explicitly: the RL
# configs set their own sim.methods. Speedups are over the paper's baseline.
methods=collective+local_sort,collective+ref_lb_micro,collective+lb_micro,odc+local_sort,odc+lb_micro,odc+ref_lb_mini,odc+lb_mini
: >"$out_dir/main.jsonl"
for name in sft-longalign-{1.5b,7b,14b,32b} sft-swesmith-{1.5b,7b,14b,32b} rl-aime-{1.5b,7b,14b,32b}; do
  config="$root/configs/paper/$name.yaml"
  setting_methods=$methods
  case $name in rl-*) setting_methods=$methods,odc+lb_mini_equal ;; esac
  for minibatch in 1 2 4 8; do
    # More minibatches for small ones: each is short and noisy.
    steps=$((800 / minibatch))
    "$sim" "$config" --set data.minibatch_size=$minibatch --set sim.minibatches=$steps \
      --set sim.methods=$setting_methods --set sim.baseline=collective+ref_lb_micro \
      --set "sim.label=$name/mb$minibatch" | grep '^{' >>"$out_dir/main.jsonl"
  done
  echo "  $name done" >&2
done
{
  "$python" "$root/tools/plot_sim.py" table "$out_dir/main.jsonl"
  echo
  echo "#### Length stand-ins: simulated statistics next to the published ones"
  echo
  "$python" "$root/tools/plot_sim.py" lengths "$out_dir/main.jsonl"
} >"$out_dir/table.md"

# --- 2. parametric sweeps around the golden setting ---
golden="$root/configs/paper/sft-longalign-1.5b.yaml"
: >"$out_dir/sweeps.jsonl"
sweep() {  # PARAM_NAME KEY VALUE...
  local param=$1 key=$2
  shift 2
  for value in "$@"; do
    "$sim" "$golden" --set "$key=$value" --set sim.minibatches=400 --set "sim.label=sweep/$param=$value" \
      --set sim.methods=collective+local_sort,collective+ref_lb_micro,collective+lb_micro,odc+local_sort,odc+lb_micro,odc+lb_mini \
      --set sim.baseline=collective+ref_lb_micro |
      grep '^{' >>"$out_dir/sweeps.jsonl"
  done
}
sweep minibatch_size data.minibatch_size 1 2 4 8 16
sweep max_length data.max_length 16384 32768 65536
sweep packing_ratio data.packing_ratio 1 2 4
sweep devices sim.devices 8 16 32
"$python" "$root/tools/plot_sim.py" sweeps "$out_dir/sweeps.jsonl" "$out_dir" >/dev/null
"$python" "$root/tools/plot_sim.py" sweep-table "$out_dir/sweeps.jsonl" >"$out_dir/sweeps.md"

# --- 3. the golden setting's first minibatch ---
"$sim" "$golden" --set sim.minibatches=1 --out "$out_dir/golden" >/dev/null
"$python" "$root/tools/plot_sim.py" timeline "$out_dir/golden/timeline.json" "$out_dir/timeline-golden.png" \
  collective+lb_micro odc+lb_mini >/dev/null

# --- 4. sharding layouts across 2 nodes, short long-tailed sequences ---
# The SWE-Smith stand-in's log-normal (sigma 0.642) with every length scaled by 1/8: mean 34700/8,
# limits [256, 8192] (a shape like the 64K one, not 64K sequences cut to 8K, which would pile them
# up at the cap).
: >"$out_dir/sharding.jsonl"
for layout in full hybrid hpz; do
  "$sim" "$root/configs/paper/sft-swesmith-7b.yaml" --set sim.devices=16 --set sim.devices_per_node=8 \
    --set data.mean_length=4338 --set data.min_length=256 --set data.max_length=8192 --set sim.minibatches=200 \
    --set sim.sharding=$layout --set "sim.label=sharding-swesmith-7b-8k/$layout" | grep '^{' >>"$out_dir/sharding.jsonl"
done
"$python" "$root/tools/plot_sim.py" sharding "$out_dir/sharding.jsonl" >"$out_dir/sharding.md"


# --- 5. context parallelism: SWE-Smith-like lengths up to 128K, the 64K cap kept ---
: >"$out_dir/context.jsonl"
for name in sft-swesmith-1.5b sft-swesmith-7b; do
  for minibatch in 1 2 4 8; do
    steps=$((400 / minibatch))
    common=(--set data.minibatch_size=$minibatch --set sim.minibatches=$steps
            --set sim.methods=collective+lb_micro,odc+lb_mini)
    "$sim" "$root/configs/paper/$name.yaml" "${common[@]}" --set "sim.label=$name/mb$minibatch/drop64k" |
      grep '^{' >>"$out_dir/context.jsonl"
    "$sim" "$root/configs/paper/$name.yaml" "${common[@]}" --set data.max_length=131072 \
      --set data.max_tokens_per_microbatch=65536 --set sim.context_parallel=true \
      --set "sim.label=$name/mb$minibatch/cp128k" | grep '^{' >>"$out_dir/context.jsonl"
  done
done
"$python" "$root/tools/plot_sim.py" context "$out_dir/context.jsonl" >"$out_dir/context.md"
echo "wrote $out_dir/table.md, $out_dir/main.jsonl, $out_dir/sweeps.md, $out_dir/sweeps.jsonl, $out_dir/sharding.md, $out_dir/context.md and $out_dir/*.png"

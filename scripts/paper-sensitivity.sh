#!/usr/bin/env bash
# How each modelling choice of the paper reproduction moves every cell of its main table: the best
# ODC schedule's speedup (LB-Mini; LB-Mini with equal counts for RL, as verl allows) over the paper's
# baseline (Collective with the reference implementation's LB-Micro packing, collective+ref_lb_micro:
# samples/s per device, ratio) under the faithful model (configs/paper/*.yaml) and with one choice
# changed at a time:
#   ours-baseline : the same model, the speedup over OUR baseline (Collective with our LB-Micro,
#                   collective+lb_micro, which plans no minibatch worse than the reference's packing)
#                   instead of the paper's
#   flops-compute : no per-microbatch fixed cost (named-device FLOP model and planner cost instead
#                   of the reference's fit a*u^2 + b*u + c)
#   bf16-gathers  : ODC gathers bf16 like the baseline (the reference gathers the fp32 masters)
#   no-contention : gathers and pushes on independent channels, no owner-side accumulation cost
#   bandwidth-collective: the collectives timed by the simple ring formula (latency + bytes x
#                   (D-1)/D over the bottleneck link) instead of NCCL's tuning model (sim.collective_model:
#                   configs/paper set nccl)
#   empty-padding : a device's padding steps under the collective (the steps beyond its own microbatch
#                   count, up to the common one) run nothing but the step's collectives, instead of a
#                   one-token dummy microbatch, which FSDP must run to join them, costing the fit's c
#                   per step (sim.collective_padding: configs/paper set dummy); the collective plans run
#                   here (LB-Micro, ours and the reference's) give every device the common count, so
#                   nothing pads and this variant shows that the choice does not move these cells
#   no-prefetch   : gathers not issued ahead of their use (sim.prefetch_depth 0 instead of 1): no
#                   overlap of gathers with compute, for both schedules
#   reference-cost-data: the reference's planners balance the model's own cost (data.cost_model) instead
#                   of the 7B fit its code holds whatever the model (sim.reference_cost: fit_7b in
#                   configs/paper); it moves the paper's baseline (ours only where the reference's plan,
#                   which our planners take as a candidate, would win), and only at 1.5B, 14B and 32B
#   clipped-lengths: the earlier length stand-ins, log-normals clipped (not truncated) to their
#                   limits (LongAlign: mean 18000, sigma 1.0, [256, 65536], 3.7% at the cap;
#                   SWE-Smith: 36000, sigma 0.5, [2048, 65536]; RL: 9200, sigma 0.5, [512, 32768])
#   earlier-model : flops-compute, bf16-gathers, no-contention and clipped-lengths at once: the
#                   simulator's model before the fit, fp32 gathers, contention and truncated stand-ins
#                   (the choices interact, so this is not the sum of the single reversions)
# Every variant but ours-baseline is over the paper's baseline (--set sim.baseline=collective+ref_lb_micro;
# tools/plot_sim.py sensitivity divides by the row of the variant's baseline).
# Writes OUT/sensitivity.jsonl and OUT/sensitivity.md (differences in points from faithful in parentheses).
# Usage: scripts/paper-sensitivity.sh [BUILD_DIR (default build)] [OUT_DIR (default paper-out)]
# One to two minutes on 2 cores (400 / minibatch size minibatches per cell, 11 variants).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${1:-$root/build}
out_dir=${2:-$PWD/paper-out}
sim="$build_dir/bin/odc-sim"
python=${PYTHON:-/usr/bin/python3}
[ -x "$sim" ] || { echo "paper-sensitivity.sh: $sim not found; build first (ninja -C $build_dir odc-sim)" >&2; exit 1; }
mkdir -p "$out_dir"

declare -A variant=(
  [faithful]=""
  [ours-baseline]="--set sim.baseline=collective+lb_micro"
  [flops-compute]="--set sim.compute_model=flops --set data.cost_model=flops"
  [bf16-gathers]="--set sim.odc_param_bytes=2"
  [no-contention]="--set sim.link_contention=false --set sim.accumulate_bytes_per_element=0"
  [bandwidth-collective]="--set sim.collective_model=bandwidth"
  [empty-padding]="--set sim.collective_padding=empty"
  [no-prefetch]="--set sim.prefetch_depth=0"
  [reference-cost-data]="--set sim.reference_cost=data"
  [clipped-lengths]=""
  [earlier-model]=""
)
order=(faithful ours-baseline flops-compute bf16-gathers no-contention bandwidth-collective empty-padding
       no-prefetch reference-cost-data clipped-lengths earlier-model)
clipped_lengths() {  # SETTING: the earlier stand-in of its dataset
  local common="--set data.over_length=truncate"
  case $1 in
    sft-longalign-*) echo "$common --set data.mean_length=18000 --set data.sigma=1.0 --set data.min_length=256" ;;
    sft-swesmith-*) echo "$common --set data.mean_length=36000 --set data.sigma=0.5 --set data.min_length=2048" ;;
    rl-aime-*) echo "$common --set data.mean_length=9200 --set data.sigma=0.5 --set data.min_length=512" ;;
  esac
}

: >"$out_dir/sensitivity.jsonl"
for name in sft-longalign-{1.5b,7b,14b,32b} sft-swesmith-{1.5b,7b,14b,32b} rl-aime-{1.5b,7b,14b,32b}; do
  config="$root/configs/paper/$name.yaml"
  methods=collective+ref_lb_micro,collective+lb_micro,odc+lb_mini
  case $name in rl-*) methods=$methods,odc+lb_mini_equal ;; esac
  variant[clipped-lengths]=$(clipped_lengths "$name")
  variant[earlier-model]="${variant[flops-compute]} ${variant[bf16-gathers]} ${variant[no-contention]} ${variant[clipped-lengths]}"
  for minibatch in 1 2 4 8; do
    for v in "${order[@]}"; do
      # shellcheck disable=SC2086  # the variant's --set pairs are words
      "$sim" "$config" --set data.minibatch_size=$minibatch --set sim.minibatches=$((400 / minibatch)) \
        --set sim.methods=$methods --set sim.baseline=collective+ref_lb_micro \
        --set "sim.label=$name/mb$minibatch/$v" ${variant[$v]} |
        grep '^{' >>"$out_dir/sensitivity.jsonl"
    done
  done
  echo "  $name done" >&2
done
"$python" "$root/tools/plot_sim.py" sensitivity "$out_dir/sensitivity.jsonl" >"$out_dir/sensitivity.md"
echo "wrote $out_dir/sensitivity.md and $out_dir/sensitivity.jsonl"

#!/usr/bin/env bash
# The paper's throughput cells trained for real on one node of GPUs (the simulated study is
# scripts/reproduce-paper.sh): for every setting of configs/gpu8/ and every minibatch size, the
# FSDP baseline (train.comm collective over NCCL, data.balance lb_micro) against ODC (train.comm
# odc over CUDA IPC, data.balance lb_mini), one rank per GPU, launched with odc-run (mpirun).
#
#   scripts/reproduce-paper-gpu.sh [--dry-run [--gpu-gb G]] [--cpu-smoke] [--gpus N] [--steps S] [--minibatches "1 2 4 8"]
#                                  [--settings "sft-longalign-1.5b ..."] [--data FILE] [--build DIR] OUT
#
#   --gpus N        ranks = GPUs of the node (default 8)
#   --steps S       optimizer steps per cell (default 20; the first 3 are warm-up, not counted)
#   --data FILE     the tokenized dataset (odc-data convert) for every setting; by default each
#                   setting trains on synthetic sequences with its stand-in lengths (throughput
#                   depends on the lengths only), made with odc-data synth
#   --dry-run       no GPU needed: checks every setting's config, plans every cell's memory per GPU
#                   (odc-train --plan-memory on --gpu-gb GPUs: the run fails when one does not fit)
#                   and prints every command
#   --gpu-gb G      memory of one GPU for the dry run's plans, in GB (default 80); a cell must fit
#                   its budget, as a real run's is: G GB less 5%
#   --cpu-smoke     runs the whole pipeline on this machine's CPU (2 ranks, a tiny model, 4 steps,
#                   one minibatch size): proves the script, not the throughput (tested in CI)
#   OUT             receives OUT/<setting>/*.jsonl (metrics per cell), OUT/cells.jsonl and
#                   OUT/table.md (samples/s per GPU of both schedules and ODC's speed-up per cell)
# Exit: 0, 1 when a run failed (named), 2 on a usage error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gpus=8
steps=20
minibatches="1 2 4 8"
settings="sft-longalign-1.5b sft-swesmith-1.5b sft-longalign-7b"
data=""
build="$root/build"
dry_run=0
gpu_gb=80
smoke=0
usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --gpu-gb) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage; gpu_gb=$2; shift 2 ;;
    --cpu-smoke) smoke=1; shift ;;
    --gpus) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage; gpus=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage; steps=$2; shift 2 ;;
    --minibatches) [ $# -ge 2 ] || usage; minibatches=$2; shift 2 ;;
    --settings) [ $# -ge 2 ] || usage; settings=$2; shift 2 ;;
    --data) [ $# -ge 2 ] || usage; data=$2; shift 2 ;;
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "reproduce-paper-gpu: unknown option '$1'" >&2; usage ;;
    *) args+=("$1"); shift ;;
  esac
done
[ ${#args[@]} -eq 1 ] || usage
out="${args[0]}"
bin="$build/bin"
for p in odc-run odc-train odc-data; do
  [ -x "$bin/$p" ] || { echo "reproduce-paper-gpu: error: $bin/$p not found; build first" >&2; exit 1; }
done
mkdir -p "$out"
extra=()
vocab=32000
if [ "$smoke" -eq 1 ]; then
  vocab=64
  gpus=2 steps=4 minibatches="2"
  settings="${settings%% *}"
  extra=(--set model.device=cpu --set model.dtype=float32 --set train.threads=1
         --set "model.config={vocab_size: 64, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"
         --set data.max_tokens_per_microbatch=512 --set data.max_length=512 --set comm.timeout_s=120)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
fi

# The stand-in lengths of each dataset (configs/paper/*.yaml state their sources).
synth_args() {
  case "$1" in
    sft-longalign-*) echo "--mean-length 18000 --sigma 1.0 --min-length 256 --max-length 65536" ;;
    sft-swesmith-*) echo "--mean-length 36000 --sigma 0.5 --min-length 2048 --max-length 65536" ;;
    *) echo "reproduce-paper-gpu: error: no stand-in lengths for setting '$1'" >&2; return 1 ;;
  esac
}

failed=0
: >"$out/cells.jsonl"
for setting in $settings; do
  config="$root/configs/gpu8/$setting.yaml"
  [ -f "$config" ] || { echo "reproduce-paper-gpu: error: no config $config" >&2; exit 1; }
  mkdir -p "$out/$setting"
  train_data="$data"
  if [ -z "$train_data" ]; then
    train_data="$out/$setting/synthetic.jsonl"
    lengths=$(synth_args "$setting")
    [ "$smoke" -eq 1 ] && lengths="--mean-length 200 --sigma 1.0 --min-length 16 --max-length 1024"
    if [ "$dry_run" -eq 1 ]; then
      echo "$bin/odc-data synth --out $train_data --num 4000 --vocab $vocab $lengths --seed 1"
    elif [ ! -s "$train_data" ] || [ "$smoke" -eq 1 ]; then
      # shellcheck disable=SC2086
      "$bin/odc-data" synth --out "$train_data" --num 4000 --vocab "$vocab" $lengths --seed 1 >/dev/null
    fi
  fi
  "$bin/odc-train" "$config" --set "data.train=${train_data}" "${extra[@]}" --dump-config >"$out/$setting/config.txt" 2>&1 \
    || { [ "$dry_run" -eq 1 ] && [ ! -e "$train_data" ] && grep -q "data.train" "$out/$setting/config.txt"; } \
    || { echo "reproduce-paper-gpu: error: $config: $(tail -1 "$out/$setting/config.txt")" >&2; exit 1; }
  if [ "$dry_run" -eq 1 ]; then
    # Every cell's memory per GPU (the minibatch size does not change it; the comm does): the
    # budget a real run gets on a G GB GPU (its memory less 5%), as GiB.
    budget=$(awk -v g="$gpu_gb" 'BEGIN { printf "%.3f", g * 1e9 / 1073741824 * 0.95 }')
    for comm in collective odc; do
      plan="$out/$setting/plan-$comm.txt"
      if "$bin/odc-train" "$config" --set "data.train=${train_data}" --set "train.comm=$comm" \
           --set "train.memory_budget_gib=$budget" --plan-memory --plan-ranks "$gpus" >"$plan" 2>&1; then
        echo "memory: $setting, train.comm $comm: $(grep -m1 '^fits:' "$plan")"
      else
        echo "reproduce-paper-gpu: error: $setting, train.comm $comm does not fit $gpus x $gpu_gb GB: $(grep -m1 -e 'does NOT fit' -e 'error:' "$plan")" >&2
        cat "$plan" >&2
        failed=1
      fi
    done
  fi
  for mb in $minibatches; do
    for schedule in "collective lb_micro" "odc lb_mini"; do
      set -- $schedule
      metrics="$out/$setting/mb$mb-$1.jsonl"
      cmd=("$bin/odc-run" -np "$gpus" --bind-to none "$bin/odc-train" "$config" --set "data.train=$train_data"
           --set "data.minibatch_size=$mb" --set "train.comm=$1" --set "data.balance=$2" --set "train.steps=$steps"
           --set "train.metrics_file=$metrics" "${extra[@]}")
      if [ "$dry_run" -eq 1 ]; then
        printf '%q ' "${cmd[@]}"; echo
        continue
      fi
      echo "== $setting, $mb sequences per GPU, $1 + $2" >&2
      rm -f "$metrics"
      if ! "${cmd[@]}" >"$out/$setting/mb$mb-$1.log" 2>&1; then
        log="$out/$setting/mb$mb-$1.log"
        echo "reproduce-paper-gpu: $setting mb$mb $1 failed: $(grep -m1 'error:' "$log" || tail -3 "$log")" >&2
        failed=1
        continue
      fi
      printf '{"setting":"%s","minibatch":%d,"comm":"%s","balance":"%s","metrics":"%s"}\n' "$setting" "$mb" "$1" "$2" \
        "$metrics" >>"$out/cells.jsonl"
    done
  done
done
[ "$dry_run" -eq 1 ] && exit "$failed"

python3 - "$out/cells.jsonl" >"$out/table.md" <<'PY'
import json, statistics, sys
cells = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rate = {}
for c in cells:
    rows = [json.loads(l) for l in open(c["metrics"]) if l.strip()]
    rows = [r for r in rows if "samples_per_s_per_rank" in r]
    counted = rows[3:] if len(rows) > 3 else rows  # warm-up steps aside
    rate[(c["setting"], c["minibatch"], c["comm"])] = statistics.median(r["samples_per_s_per_rank"] for r in counted)
print("| setting | sequences / GPU | collective + LB-Micro (samples/s/GPU) | ODC + LB-Mini | ODC speed-up |")
print("|---|---|---|---|---|")
for (setting, mb) in sorted({(s, m) for s, m, _ in rate}):
    a, b = rate.get((setting, mb, "collective")), rate.get((setting, mb, "odc"))
    speed = f"{(b / a - 1) * 100:+.1f}%" if a and b else "—"
    fmt = lambda v: f"{v:.3f}" if v else "—"
    print(f"| {setting} | {mb} | {fmt(a)} | {fmt(b)} | {speed} |")
PY
cat "$out/table.md"
exit "$failed"

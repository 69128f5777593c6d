#!/usr/bin/env bash
# Do two builds train the same model to the last bit? Runs the same fixed training jobs with the
# tools of BIN_A and of BIN_B (1, 2 and 4 ranks; ODC and the collective baseline; every balancer;
# tied embeddings and Qwen2-style biases; a checkpoint and its resume) and compares, per job, every
# deterministic metric of every step (loss, grad norm, lr, token counts, plans) and the exported
# float32 weights byte for byte. For a refactoring that must not change results.
#
#   bench/same_results.sh BIN_A BIN_B [WORK_DIR]      e.g. /tmp/old/bin build/bin
#
# Prints one JSON line per job and a summary line; exits 1 if any job that must match differs.
# Exactness: one rank and the collective baseline sum in a fixed order, so those jobs must be
# bitwise equal. An ODC owner adds pushes in arrival order, which varies from run to run even with
# one build once it receives more than two pushes per unit (several microbatches, or more than two
# ranks): those jobs are compared to a relative 1e-5 (the multi-rank tests' bound) and reported,
# not failed, when not bitwise equal. With two ranks and one microbatch each ("one_mb" jobs: every
# sequence of a rank packed into one microbatch) an owner adds exactly two pushes, a + b == b + a,
# so ODC must be bitwise equal there. Under comm.deterministic every owner folds its clients' pushes
# in a fixed order, so the "deterministic" jobs (ODC over UCX and over IPC) must be bitwise equal too.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B [WORK_DIR]" >&2; exit 2; }
bin_a="$(cd "$1" && pwd)"
bin_b="$(cd "$2" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$bin_a/odc-data" synth --out "$work/data.jsonl" --num 600 --vocab 32 --min-length 8 --max-length 128 \
  --mean-length 40 --sigma 0.8 --seed 3 >/dev/null
small="{vocab_size: 32, hidden_size: 64, intermediate_size: 96, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"

# name ranks args...
jobs=(
  "np1_odc|1|--set train.comm=odc"
  "np1_collective|1|--set train.comm=collective"
  "np2_odc_lb_mini|2|--set train.comm=odc --set data.balance=lb_mini"
  "np2_odc_lb_micro|2|--set train.comm=odc --set data.balance=lb_micro"
  "np2_odc_local_sort|2|--set train.comm=odc --set data.balance=local_sort"
  "np2_odc_round_robin|2|--set train.comm=odc --set data.balance=round_robin --set data.max_tokens_per_microbatch=160"
  "np2_collective_lb_micro|2|--set train.comm=collective"
  "np2_collective_round_robin|2|--set train.comm=collective --set data.balance=round_robin --set data.max_tokens_per_microbatch=160"
  "np2_odc_tied|2|--set train.comm=odc --set model.config.tie_word_embeddings=true"
  "np2_odc_bias_sequence|2|--set train.comm=odc --set model.config.attention_bias=true --set train.loss_reduction=sequence"
  "np2_odc_quadratic|2|--set train.comm=odc --set data.cost_model=quadratic --set data.cost_a=0.001"
  "np2_odc_one_mb_lb_mini|2|--set train.comm=odc --set data.max_tokens_per_microbatch=4096"
  "np2_odc_one_mb_tied_bias|2|--set train.comm=odc --set data.max_tokens_per_microbatch=4096 --set model.config.tie_word_embeddings=true --set model.config.attention_bias=true"
  "np2_odc_one_mb_resume|2|--set train.comm=odc --set data.max_tokens_per_microbatch=4096 --set train.stop_at_step=5"
  "np2_collective_resume|2|--set train.comm=collective --set train.stop_at_step=5"
  "np4_collective|4|--set train.comm=collective"
  "np4_odc|4|--set train.comm=odc"
  "np2_odc_ipc_one_mb|2|--set train.comm=odc --set comm.transport=ipc --set data.max_tokens_per_microbatch=4096"
  "np2_odc_ipc_deterministic|2|--set train.comm=odc --set comm.transport=ipc --set comm.deterministic=true"
  "np2_odc_ucx_deterministic|2|--set train.comm=odc --set comm.transport=ucx --set comm.deterministic=true"
  "np4_odc_ipc_deterministic|4|--set train.comm=odc --set comm.transport=ipc --set comm.deterministic=true"
)

run_job() {  # LABEL BIN NAME RANKS ARGS...
  local label="$1" bin="$2" name="$3" ranks="$4"; shift 4
  local dir="$work/$label-$name"
  rm -rf "$dir" && mkdir -p "$dir"
  local common=(--set "model.config=$small" --set "data.train=$work/data.jsonl" --set data.minibatch_size=4
                --set train.steps=10 --set train.warmup_steps=2 --set train.log_level=warn
                --set "train.metrics_file=$dir/metrics.jsonl" --set "checkpoint.export_hf=$dir/hf"
                --set checkpoint.export_dtype=float32)
  if [[ "$name" == *resume ]]; then
    mpirun -np "$ranks" --oversubscribe --bind-to none "$bin/odc-train" "${common[@]}" $@ \
      --set "checkpoint.dir=$dir/ckpt" >"$dir/log" 2>&1
    # The second run resumes from step 5 and runs to the end.
    mpirun -np "$ranks" --oversubscribe --bind-to none "$bin/odc-train" "${common[@]}" $@ \
      --set train.stop_at_step=0 --set "checkpoint.dir=$dir/ckpt" >>"$dir/log" 2>&1
  else
    mpirun -np "$ranks" --oversubscribe --bind-to none "$bin/odc-train" "${common[@]}" $@ >"$dir/log" 2>&1
  fi
  echo "$dir"
}

results=()
for job in "${jobs[@]}"; do
  IFS='|' read -r name ranks args <<<"$job"
  # shellcheck disable=SC2086
  dir_a=$(run_job A "$bin_a" "$name" "$ranks" $args) || { echo "{\"job\": \"$name\", \"error\": \"build A failed, see $work\"}"; exit 1; }
  # shellcheck disable=SC2086
  dir_b=$(run_job B "$bin_b" "$name" "$ranks" $args) || { echo "{\"job\": \"$name\", \"error\": \"build B failed, see $work\"}"; exit 1; }
  results+=("$name|$ranks|$dir_a|$dir_b")
done

/usr/bin/python3 - "${results[@]}" <<'PY'
import glob, hashlib, json, os, sys

FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "target_tokens", "microbatches", "padded_microbatches",
          "planned_cost", "planned_cost_max", "planned_makespan", "bubble_planned", "flops", "epoch"]

def metrics(d):
    return [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]

def weights(d):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "hf", "*.safetensors"))):
        out[os.path.basename(f)] = hashlib.sha256(open(f, "rb").read()).hexdigest()
    return out

bad = 0
for item in sys.argv[1:]:
    name, ranks, a, b = item.split("|")
    ma, mb = metrics(a), metrics(b)
    exact = len(ma) == len(mb) and all(x[k] == y[k] for x, y in zip(ma, mb) for k in FIELDS)
    same_weights = weights(a) == weights(b) and len(weights(a)) > 0
    rel = max((abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(ma, mb)), default=0.0)
    must_be_exact = ranks == "1" or "collective" in name or "one_mb" in name or "deterministic" in name
    ok = (exact and same_weights) if must_be_exact else (len(ma) == len(mb) and rel <= 1e-5)
    bad += not ok
    print(json.dumps({"bench": "same_results", "job": name, "ranks": int(ranks), "steps": len(ma),
                      "metrics_bitwise_equal": exact, "weights_bitwise_equal": same_weights,
                      "max_rel_loss_diff": rel, "must_be_bitwise": must_be_exact, "ok": ok,
                      "final_loss": ma[-1]["loss"] if ma else None}))
print(json.dumps({"bench": "same_results", "jobs": len(sys.argv) - 1, "failed": bad}))
sys.exit(1 if bad else 0)
PY

#!/usr/bin/env bash
# The Hugging Face export's memory and time, two builds side by side: a Qwen2.5-0.5B-shaped model
# (494M parameters, vocabulary 151,936, tied head, 24 layers; random weights that transformers
# makes and saves in bfloat16) is fine-tuned for 2 steps on 2 CPU ranks (ODC over MPI) and
# exported with checkpoint.export_hf, once per build; then odc-ckpt export writes a native
# checkpoint of the same model (odc-ckpt import, 2 ranks) back as a Hugging Face directory.
#
#   bench/export_memory.sh [BUILD_DIR] [BASELINE_BUILD_DIR] [WORK_DIR]
#
# Prints one JSON line per run:
#   {"bench": "export_memory", "build": "after" | "before", "run": "train" | "train_no_export" | "ckpt_export", ...}
# train: the memory plan's prediction and the measured peak (odc-train's end-of-run line, rank 0),
# their error, the export's seconds (its own log line), each rank's peak RSS (/usr/bin/time), and
# the export read back: odc-eval's loss and transformers' (float64 log-softmax over the float32
# model) on the first EVAL_SEQUENCES sequences, with their relative difference. train_no_export:
# the same run without the export (the plan's error without it). The before row says whether its
# export is the after one's bytes (usually: ODC's sums may land in another order from run to run
# without comm.deterministic, so false is no error). ckpt_export: odc-ckpt export's seconds and
# peak RSS, and whether both builds wrote the same bytes (the same input, so they must).
# Peaks do not depend on the machine's load; seconds do (a shared 2-core machine: read them as
# rough). Environment: STEPS (2), EVAL_SEQUENCES (8), PYTHON (transformers; default
# ~/.cache/odc/python/bin/python), KEEP=1 keeps WORK_DIR.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
after="$(cd "${1:-$root/build}" && pwd)/bin"
before="${2:+$(cd "$2" && pwd)/bin}"
work="${3:-$(mktemp -d)}"
mkdir -p "$work" && work="$(cd "$work" && pwd)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
python="${PYTHON:-$HOME/.cache/odc/python/bin/python}"
steps="${STEPS:-2}"
eval_sequences="${EVAL_SEQUENCES:-8}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

if [ ! -f "$work/model/model.safetensors" ]; then
  "$python" - "$work/model" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, Qwen2Config
config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                     num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=2048)
torch.manual_seed(0)
AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(torch.bfloat16).save_pretrained(sys.argv[1])
PY
fi
"$after/odc-data" synth --out "$work/data.jsonl" --num 64 --vocab 1000 --max-length 128 --mean-length 64 --seed 1 >/dev/null
head -n "$eval_sequences" "$work/data.jsonl" >"$work/eval.jsonl"

# transformers' loss over the loss_mask positions of eval.jsonl (loss_mask[i] = 1: token i is a target).
hf_loss() {
  "$python" - "$1" "$work/eval.jsonl" <<'PY'
import json, sys, torch, transformers
from transformers import AutoModelForCausalLM
torch.set_num_threads(2)
transformers.logging.disable_progress_bar()
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
total, count = 0.0, 0
for line in open(sys.argv[2]):
    r = json.loads(line)
    ids = torch.tensor([r["input_ids"]])
    mask = torch.tensor(r["loss_mask"][1:], dtype=torch.bool)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].double()
    nll = -torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
    total += float(nll[mask].sum())
    count += int(mask.sum())
print(total / count)
PY
}

# train LABEL BIN_DIR EXPORT(0|1): one JSON line.
train() {
  local label="$1" bin="$2" export="$3" out="$work/$1-train$3"
  rm -rf "$out" "$out.hf" && mkdir -p "$out"
  local sets=(--set "data.train=$work/data.jsonl" --set "model.checkpoint=$work/model" --set "train.steps=$steps"
              --set data.minibatch_size=4 --set data.max_tokens_per_microbatch=256 --set train.peak_flops=1e10
              --set train.memory_budget_gib=10)  # a fixed budget: others' memory use must not refuse the run
  [ "$export" = 1 ] && sets+=(--set "checkpoint.export_hf=$out.hf")
  mpirun --oversubscribe --bind-to none -np 2 sh -c \
    '/usr/bin/time -f "%M %e" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$out/rss" "$bin/odc-train" "${sets[@]}" >"$out/log" 2>&1
  local odc_loss="null" hf="null" same="null"
  if [ "$export" = 1 ]; then
    odc_loss=$("$bin/odc-eval" --model "$out.hf" --data "$work/eval.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])')
    hf=$(hf_loss "$out.hf")
    [ "$label" = before ] && { cmp -s "$work/after-train1.hf/model.safetensors" "$out.hf/model.safetensors" && same=true || same=false; }
  fi
  /usr/bin/python3 - "$label" "$export" "$out" "$odc_loss" "$hf" "$same" <<'PY'
import json, re, sys
label, export, out, odc_loss, hf = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
same = json.loads(sys.argv[6])
log = open(f"{out}/log").read()
m = re.search(r"memory: predicted ([0-9.]+) MiB per rank, measured ([0-9.]+) MiB", log)
e = re.search(r"export: .* in ([0-9.]+) s", log)
rss = [int(open(f"{out}/rss.{r}").read().split()[0]) / 1024 for r in (0, 1)]
row = {"bench": "export_memory", "build": label, "run": "train" if export else "train_no_export",
       "predicted_mib": float(m.group(1)), "measured_mib": float(m.group(2)),
       "error_pct": round(100 * (float(m.group(2)) / float(m.group(1)) - 1), 1),
       "export_s": float(e.group(1)) if e else None, "peak_rss_mib": [round(x, 1) for x in rss]}
if export:
    odc, theirs = float(odc_loss), float(hf)
    row.update({"odc_eval_loss": odc, "transformers_loss": theirs, "loss_rel_diff": abs(odc - theirs) / odc})
    if same is not None:
        row["same_bytes_as_after"] = same
print(json.dumps(row))
PY
}

# ckpt_export LABEL BIN_DIR: odc-ckpt export of the imported native checkpoint; one JSON line.
ckpt_export() {
  local label="$1" bin="$2" out="$work/$1-ckpt-export"
  rm -rf "$out"
  /usr/bin/time -f "%M %e" -o "$work/$label-ckpt.time" "$bin/odc-ckpt" export --from "$work/native" --out "$out" \
    --dtype bf16 >/dev/null
  local same="null"
  [ -n "$before" ] && [ "$label" = before ] && { cmp -s "$work/after-ckpt-export/model.safetensors" \
    "$out/model.safetensors" && same=true || same=false; }
  read -r kb seconds <"$work/$label-ckpt.time"
  echo "{\"bench\": \"export_memory\", \"build\": \"$label\", \"run\": \"ckpt_export\", \"seconds\": $seconds," \
       "\"peak_rss_mib\": $((kb / 1024)), \"same_bytes_as_after\": $same}"
}

rm -rf "$work/native"
"$after/odc-ckpt" import --from "$work/model" --out "$work/native" --world-size 2 >/dev/null
train after "$after" 1
train after "$after" 0
[ -n "$before" ] && train before "$before" 1
# Back to back, from a warm page cache (the training runs evict the checkpoint's files).
cat "$work"/native/step-*/rank-*.safetensors >/dev/null
ckpt_export after "$after"
[ -n "$before" ] && ckpt_export before "$before"
exit 0

#!/usr/bin/env bash
# odc-train's training-loop keys as a user meets them: --dump-config resolves the global batch for
# the ranks it runs on; train.epochs trains each epoch's remainder as a smaller last step (the
# progress line and the metrics show the batch); data.max_length logs what it dropped or cut; wsd
# and inverse_sqrt run; a global batch lb_micro cannot split over 2 ranks is an error on every rank.
# Usage: test_odc_train_loop.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ok() { echo "ok   [$1]"; }

# 10 sequences of 16..40 tokens.
"$bin/odc-data" synth --out "$work/d.jsonl" --num 10 --min-length 16 --max-length 40 --mean-length 24 --seed 3 >/dev/null
small=(--set "data.train=$work/d.jsonl" --set train.peak_flops=1e10
       --set "model.config={vocab_size: 64, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 4, num_key_value_heads: 2}")
# has NAME TEXT OUTPUT: OUTPUT must contain TEXT.
has() { if grep -qF -- "$2" <<<"$3"; then return 0; fi; fail "$1" "lacks '$2' in:"$'\n'"$3"; return 1; }

# 1. --dump-config resolves the global batch for the world it runs in.
out=$("$bin/odc-train" "${small[@]}" --set data.global_batch_size=8 --dump-config 2>&1) &&
  has "dump-config, 1 rank" "#   global batch: 8 sequences per step (data.global_batch_size, 8 per rank)" "$out" &&
  has "dump-config, 1 rank" "global_batch_size: 8" "$out" && ok "dump-config, 1 rank"
out=$(timeout 120 "${mpirun[@]}" -np 2 "$bin/odc-train" "${small[@]}" --set data.global_batch_size=8 --dump-config 2>&1) &&
  has "dump-config, 2 ranks" "# resolved for 2 ranks:" "$out" &&
  has "dump-config, 2 ranks" "global batch: 8 sequences per step (data.global_batch_size, 4 per rank)" "$out" &&
  ok "dump-config, 2 ranks"
out=$("$bin/odc-train" "${small[@]}" --set data.minibatch_size=3 --set train.warmup_ratio=0.1 --set train.steps=50 --dump-config 2>&1) &&
  has "dump-config, per rank" "global batch: 3 sequences per step (data.minibatch_size 3 x 1 rank, 3 per rank)" "$out" &&
  has "dump-config, per rank" "#   warmup: 5 steps (train.warmup_ratio 0.1)" "$out" && ok "dump-config, per rank"

# 2. Two epochs of 10 sequences in steps of 4: 4, 4, 2 per epoch; the progress line and the metrics
# show each step's batch.
if out=$(timeout 300 "$bin/odc-train" "${small[@]}" --set data.global_batch_size=4 --set train.epochs=2 \
           --set train.warmup_ratio=0.2 --set train.schedule=wsd --set "train.metrics_file=$work/epochs.jsonl" 2>&1); then
  has "epochs" "train.epochs 2: 3 steps per epoch (the last trains the remaining 2 sequences), 6 steps" "$out" &&
    has "epochs" "lr: wsd schedule, peak 0.003, warmup: 1 step, decay: the last 1 step" "$out" &&
    has "epochs" "step     6/6" "$out" && has "epochs" "| batch 2 seq " "$out" && has "epochs" "| batch 4 seq " "$out" &&
    if seqs=$(/usr/bin/python3 -c 'import json,sys; print(",".join(str(json.loads(l)["sequences"]) for l in open(sys.argv[1])))' "$work/epochs.jsonl") &&
       [ "$seqs" = "4,4,2,4,4,2" ]; then ok "epochs (sequences per step $seqs)"; else fail "epochs" "metrics sequences: $seqs"; fi
else
  fail "epochs" "$out"
fi

# 3. data.max_length: drop logs how many it left out, truncate how many it cut.
if out=$(timeout 300 "$bin/odc-train" "${small[@]}" --set data.global_batch_size=2 --set train.steps=1 \
           --set data.max_length=24 --set data.over_length=drop 2>&1); then
  dropped=$(/usr/bin/python3 -c 'import json,sys; print(sum(len(json.loads(l)["input_ids"]) > 24 for l in open(sys.argv[1])))' "$work/d.jsonl")
  has "max_length drop" "data.max_length 24: dropped $dropped of 10 sequences" "$out" && ok "max_length drop ($dropped dropped)"
else
  fail "max_length drop" "$out"
fi
if out=$(timeout 300 "$bin/odc-train" "${small[@]}" --set data.global_batch_size=2 --set train.steps=1 \
           --set data.max_length=24 --set data.over_length=truncate 2>&1); then
  has "max_length truncate" "data.max_length 24: truncated $dropped of 10 sequences" "$out" &&
    has "max_length truncate" "microbatch cap 24 tokens" "$out" && ok "max_length truncate"
else
  fail "max_length truncate" "$out"
fi

# 4. inverse_sqrt runs and reports its schedule.
if out=$(timeout 300 "$bin/odc-train" "${small[@]}" --set data.global_batch_size=2 --set train.steps=2 \
           --set train.schedule=inverse_sqrt --set train.warmup_steps=1 2>&1); then
  has "inverse_sqrt" "lr: inverse_sqrt schedule" "$out" && ok "inverse_sqrt"
else
  fail "inverse_sqrt" "$out"
fi

# 5. A global batch of 7 cannot be split evenly by the collective baseline's lb_micro: every rank
# stops with the reason, before reading data.
out=$(timeout 120 "${mpirun[@]}" -np 2 "$bin/odc-train" "${small[@]}" --set data.global_batch_size=7 \
        --set train.comm=collective --set train.steps=1 2>&1); rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
  fail "global batch 7 over 2 ranks, lb_micro" "exit $rc"$'\n'"$out"
else
  has "global batch 7 over 2 ranks, lb_micro" "the global batch of 7 sequences (data.global_batch_size) does not divide over 2 ranks" "$out" &&
    ok "global batch 7 over 2 ranks, lb_micro: exit $rc"
fi

finish_test "test_odc_train_loop"

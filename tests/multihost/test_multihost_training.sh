#!/usr/bin/env bash
# Training across 2 hosts x 2 ranks (network namespaces, scripts/netns-hosts.sh): ODC and the
# collective baseline, with full, hybrid and hpz sharding, and with sequences over the cap split
# over ranks of both hosts (context parallelism), give one rank's losses; the parameter
# traffic really crosses the hosts' link (UCX and MPI take TCP between hosts, shared memory only
# within one), and hybrid sharding moves less of it than full; a rate-limited link throttles the
# run (the token bucket reports overlimits) and the losses stay the same.
# Usage: test_multihost_training.sh FIXTURE_DIR BIN_DIR WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bin="$(cd "$2" && pwd)"
work="$3"
rm -rf "$work" && mkdir -p "$work" && work="$(cd "$work" && pwd)"

"$bin/odc-data" synth --out "$work/data.jsonl" --num 96 --max-length 96 --mean-length 32 --seed 5 > /dev/null
model="model.config={vocab_size: 96, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2}"
common=(--set "$model" --set "data.train=$work/data.jsonl" --set train.steps=6 --set train.warmup_steps=2
        --set data.max_tokens_per_microbatch=96 --set train.peak_flops=1e10 --set train.log_level=warn
        --set comm.timeout_s=60)

# The 1-rank reference: the same global batch of 8 sequences per step.
"$bin/odc-train" "${common[@]}" --set data.minibatch_size=8 --set "train.metrics_file=$work/one.jsonl" \
  > "$work/one.log" 2>&1 || fail "1-rank reference" "$(tail -20 "$work/one.log")"

link_bytes() { "$hosts" traffic | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["hosts"][1]["tx_bytes"])'; }
# run NAME ARGS...: 2 hosts x 2 ranks; rank 0's metrics in NAME.jsonl; the bytes host 1 sent in NAME.bytes.
run() {
  local name="$1"; shift
  local before after
  before=$(link_bytes)
  if across "$bin/odc-train" "${common[@]}" --set data.minibatch_size=2 \
       --set "train.metrics_file=$work/$name-{rank}.jsonl" "$@" > "$work/$name.log" 2>&1; then
    after=$(link_bytes)
    echo $(( after - before )) > "$work/$name.bytes"
    cp "$work/$name-0.jsonl" "$work/$name.jsonl"
    return 0
  fi
  fail "$name" "$(tail -30 "$work/$name.log")"
  return 1
}

run odc-full --set train.comm=odc && same_losses "ODC, full sharding, 2 hosts x 2 ranks = 1 rank" "$work/odc-full.jsonl" "$work/one.jsonl" 1e-5
run collective-full --set train.comm=collective && same_losses "collective, full sharding = 1 rank" "$work/collective-full.jsonl" "$work/one.jsonl" 1e-5
run odc-hybrid --set train.comm=odc --set train.sharding=hybrid --set train.log_level=info && same_losses "ODC, hybrid sharding = 1 rank" "$work/odc-hybrid.jsonl" "$work/one.jsonl" 1e-5
run collective-hybrid --set train.comm=collective --set train.sharding=hybrid && same_losses "collective, hybrid sharding = 1 rank" "$work/collective-hybrid.jsonl" "$work/one.jsonl" 1e-5
run odc-hpz --set train.comm=odc --set train.sharding=hpz --set train.log_level=info && same_losses "ODC, hpz sharding = 1 rank" "$work/odc-hpz.jsonl" "$work/one.jsonl" 1e-5
# Context parallelism across hosts: sequences over a cap of 48 tokens split over 2 ranks, ODC's
# groups chosen per minibatch (members on either host) and the collective's static pairs, their
# keys and values exchanged point to point over MPI (the hosts share no memory).
run odc-context --set train.comm=odc --set data.max_tokens_per_microbatch=48 --set train.log_level=info \
  && same_losses "ODC, sequences split over ranks of both hosts = 1 rank" "$work/odc-context.jsonl" "$work/one.jsonl" 1e-5
run collective-context --set train.comm=collective --set data.max_tokens_per_microbatch=48 --set train.log_level=info \
  && same_losses "collective, static context pairs = 1 rank" "$work/collective-context.jsonl" "$work/one.jsonl" 1e-5
for name in odc-context collective-context; do
  grep -q "context parallelism: sequences over the microbatch cap of 48 tokens .*exchanges over MPI" "$work/$name.log" \
    || fail "$name exchanges over MPI" "$(grep -m2 'context parallelism\|error' "$work/$name.log")"
  /usr/bin/python3 -c 'import json,sys; sys.exit(0 if sum(json.loads(l).get("split_microbatches", 0) for l in open(sys.argv[1])) > 0 else 1)' \
    "$work/$name.jsonl" || fail "$name splits microbatches" "no split_microbatches in $work/$name.jsonl"
done

# The layouts were the ones asked for, on 2 real hosts.
for name in odc-hybrid odc-hpz; do
  grep -q "sharding: ${name#odc-}: 2 hosts x 2 ranks" "$work/$name.log" \
    || fail "$name layout" "no 'sharding: ${name#odc-}: 2 hosts x 2 ranks' in the log:"$'\n'"$(grep -m3 sharding "$work/$name.log")"
done

# Traffic: per microbatch a rank gathers every unit in forward (P, the model's bytes) and every
# decoder layer again in backward (0.857 P here: the embedding's backward needs no weights, the
# head's runs with its forward), half of it from the other host's owners, and pushes half of its
# gradient (P / 2) there. With at least one microbatch per rank, host 1 sends at least
# 2 x 0.93 P (host 0's gathers) + 2 x 0.5 P (its own pushes) = 2.86 P per step under full
# sharding; hybrid sends only the gradient sum, P per step (2 ranks x half the model).
params_bytes=$(/usr/bin/python3 -c 'print(4 * (96*64*2 + 2*(64*64*2 + 64*32*2 + 3*64*128 + 128) + 64))')
if [ -f "$work/odc-full.bytes" ] && [ -f "$work/odc-hybrid.bytes" ]; then
  full=$(cat "$work/odc-full.bytes"); hybrid=$(cat "$work/odc-hybrid.bytes")
  floor=$(( 6 * params_bytes * 28 / 10 ))
  if [ "$full" -ge "$floor" ] && [ "$hybrid" -lt "$full" ]; then
    echo "ok   [traffic crosses the link] host 1 sent $full bytes (full, >= $floor), $hybrid (hybrid)"
  else
    fail "traffic crosses the link" "host 1 sent $full bytes under full sharding (expected >= $floor) and $hybrid under hybrid (expected fewer)"
  fi
fi

# A rate-limited link: slower, same losses (the token bucket must have held packets back).
"$hosts" rate 1 50mbit
if run odc-limited --set train.comm=odc; then
  same_losses "ODC over a 50 Mbit/s link = 1 rank" "$work/odc-limited.jsonl" "$work/one.jsonl" 1e-5
  over=$(ip netns exec "$ODC_NETNS-h1" tc -s qdisc show dev eth0 | grep -o 'overlimits [0-9]*' | head -1 | awk '{print $2}')
  if [ "${over:-0}" -gt 0 ]; then echo "ok   [the rate limit held traffic back] overlimits $over"
  else fail "the rate limit held traffic back" "tc reports no overlimits on host 1's link"; fi
  t_full=$(/usr/bin/python3 -c 'import json,sys; print(sum(1/json.loads(l)["samples_per_s_per_rank"] for l in open(sys.argv[1])))' "$work/odc-full.jsonl")
  t_lim=$(/usr/bin/python3 -c 'import json,sys; print(sum(1/json.loads(l)["samples_per_s_per_rank"] for l in open(sys.argv[1])))' "$work/odc-limited.jsonl")
  echo "     (seconds per sample per rank, summed over the steps: $t_full unlimited, $t_lim at 50 Mbit/s)"
fi
"$hosts" rate 1 off

# Uneven hosts (2 ranks on host 0, 1 on host 1): hybrid sharding refuses them at start-up, naming
# the placement, instead of training a wrong layout.
timeout 120 "$hosts" mpirun --npernode 2 -np 3 --bind-to none -x OMP_NUM_THREADS "$bin/odc-train" "${common[@]}" \
  --set data.minibatch_size=2 --set train.comm=odc --set train.sharding=hybrid > "$work/uneven.log" 2>&1
status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && grep -q "hosts of the job run different numbers of ranks (from 1 to 2)" "$work/uneven.log"; then
  echo "ok   [uneven hosts are refused] exit $status: $(grep -m1 -o 'the 2 hosts of the job.*' "$work/uneven.log" | head -c 100)"
else
  fail "uneven hosts are refused" "exit $status (124: timeout);"$'\n'"$(tail -10 "$work/uneven.log")"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]

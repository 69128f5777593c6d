#!/usr/bin/env bash
# odc-sim command-line behaviour: --help, a good run (JSON lines + table, --out files), a
# calibrated run from a small synthetic trace, usage errors exiting 2 and bad inputs (unknown
# device, missing calibration file, bad length-file line, impossible method) exiting 1 with a
# message naming the culprit.
# Usage: bash test_odc_sim.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set -e

tool="$bin/odc-sim"
# shellcheck source=cli_tool_checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/cli_tool_checks.sh"

# --- help and dump-config ---
run_tool help --help
expect_rc help 0
expect_in help out "usage: odc-sim"
expect_in help out "--out DIR"
run_tool dump --dump-config
expect_rc dump 0
expect_in dump out "odc_inter_node_efficiency"

# --- a good run: small model, a lengths file, every method ---
lengths="$work/lengths.txt"
{
  echo "# sequence lengths, one per line"
  for i in $(seq 1 64); do echo $(( (i * 7919) % 6000 + 100 )); done
} >"$lengths"
config="$work/small.yaml"
cat >"$config" <<EOF
model:
  config: {vocab_size: 32000, hidden_size: 512, intermediate_size: 1376, num_hidden_layers: 4,
           num_attention_heads: 8, num_key_value_heads: 4, tie_word_embeddings: false, attention_bias: false}
data: {lengths: $lengths, minibatch_size: 4}
sim: {devices: 4, minibatches: 3}
EOF
run_tool good "$config" --out "$work/out"
expect_rc good 0
json_lines=$(grep -c '^{"sim":"small","method":' "$work/good.out" || true)
[ "$json_lines" -eq 5 ] || fail "good: $json_lines JSON lines, expected 5: $(cat "$work/good.out")"
for key in '"method":"odc+lb_mini"' '"samples_per_s_per_device":' '"speedup":' '"bubble_simulated":' \
           '"bubble_planned":' '"zero_overhead_bound":' '| method |' 'collective+lb_micro (baseline)'; do
  expect_in good out "$key"
done
for file in results.jsonl table.md timeline.json; do
  [ -s "$work/out/$file" ] || fail "good: --out did not write $file"
done
if [ -s "$work/out/results.jsonl" ]; then
  [ "$(wc -l <"$work/out/results.jsonl")" -eq 5 ] || fail "good: results.jsonl does not hold 5 lines"
fi
if command -v python3 >/dev/null; then
  python3 -c 'import json, sys
for line in open(sys.argv[1]): json.loads(line)
json.load(open(sys.argv[2]))' "$work/out/results.jsonl" "$work/out/timeline.json" ||
    fail "good: results.jsonl or timeline.json is not valid JSON"
fi
# --set overrides and a subset of methods.
run_tool subset "$config" --set sim.methods=odc+lb_mini --set=sim.devices=2
expect_rc subset 0
json_lines=$(grep -c '^{"sim":' "$work/subset.out" || true)
[ "$json_lines" -eq 1 ] || fail "subset: $json_lines JSON lines, expected 1"
expect_in subset out '"devices":2'
expect_in good out '"sharding":"full"'
expect_in good out 'sharding full,'
# Sharding layouts: the layout in every JSON line and the table's heading, hybrid's all-reduce
# and hpz's refresh reported, fewer bytes across nodes than full.
for layout in full hybrid hpz; do
  run_tool "sharding_$layout" "$config" --set sim.sharding=$layout --set sim.devices_per_node=2
  expect_rc "sharding_$layout" 0
  expect_in "sharding_$layout" out "\"sharding\":\"$layout\""
  expect_in "sharding_$layout" out "4 devices (2 per node), sharding $layout,"
  expect_in "sharding_$layout" out '| inter-node GB |'
done
if command -v python3 >/dev/null; then
  python3 - "$work" <<'EOF' || fail "sharding: see above"
import json, sys
rows = {l: {r["method"]: r for r in map(json.loads, (x for x in open(f"{sys.argv[1]}/sharding_{l}.out") if x.startswith("{")))}
        for l in ("full", "hybrid", "hpz")}
problems = []
for method, full in rows["full"].items():
    hybrid, hpz = rows["hybrid"][method], rows["hpz"][method]
    if not hybrid["inter_node_gb"] < full["inter_node_gb"]:
        problems.append(f"{method}: hybrid moves {hybrid['inter_node_gb']} GB across nodes, full {full['inter_node_gb']}")
    if not (hybrid["replica_sum_s"] > 0 and full["replica_sum_s"] == 0 and hpz["refresh_s"] > 0):
        problems.append(f"{method}: replica_sum_s / refresh_s not where the layouts put them")
for p in problems:
    print("FAIL: sharding:", p)
sys.exit(1 if problems else 0)
EOF
fi
run_tool sharding_one_node "$config" --set sim.sharding=hybrid
expect_rc sharding_one_node 0
expect_in sharding_one_node out "sharding hybrid (one node: as full),"

# --- calibrated from a trace in odc-train's format ---
if command -v python3 >/dev/null; then
  trace="$work/trace.json"
  python3 - "$trace" <<'EOF'
import json, sys
model = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False}
events, clock = [], 0.0
def add(rank, cat, name, seconds, args):
    global clock
    events.append({"ph": "X", "cat": cat, "name": name, "ts": clock * 1e6, "dur": seconds * 1e6,
                   "pid": rank, "tid": 0, "args": args})
    clock += seconds
shapes = [(512, 512 * 513 / 2), (512, 2 * 256 * 257 / 2), (1024, 1024 * 1025 / 2), (300, 300 * 301 / 2)]
for step in range(2):
    for rank in range(2):
        for m, (tokens, pairs) in enumerate(shapes):
            args = {"step": step, "microbatch": m, "tokens": tokens, "pairs": pairs}
            for unit in range(3):
                add(rank, "forward", "forward", 1e-4 + 1e-6 * tokens + 1e-10 * pairs * (unit > 0), dict(args, unit=unit))
            add(rank, "head", "head", 2e-4 + 3e-6 * tokens, dict(args, unit=3))
            for unit in range(2, -1, -1):
                add(rank, "backward", "backward", 2e-4 + 2e-6 * tokens + 2e-10 * pairs * (unit > 0), dict(args, unit=unit))
        add(rank, "optimizer", "optimizer step", 1e-3, {"step": step})
json.dump({"traceEvents": events, "displayTimeUnit": "ms",
           "otherData": {"world_size": 2, "comm": "odc", "balance": "lb_mini", "threads": 1, "model": model}},
          open(sys.argv[1], "w"))
EOF
  run_tool calibrated --set sim.device=calibrated --set "sim.calibration=$trace" --set "data.lengths=$lengths" \
    --set sim.devices=2 --set sim.minibatches=2 --set sim.param_bytes=4
  expect_rc calibrated 0
  expect_in calibrated out "calibrated from $trace"
  expect_in calibrated out "the trace measured"
  # A different simulated model than the traced one is refused.
  run_tool calibrated_shape "$config" --set sim.device=calibrated --set "sim.calibration=$trace"
  expect_rc calibrated_shape 1
  expect_in calibrated_shape err "hidden_size = 32"
fi

# --- usage errors: exit 2 ---
run_tool unknown_option "$config" --frobnicate
expect_rc unknown_option 2
expect_in unknown_option err "odc-sim: unknown option '--frobnicate'"
expect_in unknown_option err "usage: odc-sim"
run_tool set_no_value "$config" --set
expect_rc set_no_value 2
expect_in set_no_value err "--set needs a value"
run_tool set_malformed "$config" --set sim.devices
expect_rc set_malformed 2
expect_in set_malformed err "--set expects key=value"
run_tool out_no_value "$config" --out
expect_rc out_no_value 2
run_tool two_configs "$config" "$config"
expect_rc two_configs 2
expect_in two_configs err "only one config file"

# --- bad inputs: exit 1 with the culprit named ---
run_tool bad_device "$config" --set sim.device=tpu-v9
expect_rc bad_device 1
expect_in bad_device err "unknown device 'tpu-v9'"
run_tool no_calibration "$config" --set sim.device=calibrated
expect_rc no_calibration 1
expect_in no_calibration err "sim.calibration"
run_tool missing_calibration "$config" --set sim.device=calibrated --set sim.calibration="$work/nope.json"
expect_rc missing_calibration 1
expect_in missing_calibration err "$work/nope.json"
bad_lengths="$work/bad_lengths.txt"
printf '100\n200\nlots\n' >"$bad_lengths"
run_tool bad_lengths "$config" --set "data.lengths=$bad_lengths"
expect_rc bad_lengths 1
expect_in bad_lengths err "$bad_lengths:3"
expect_in bad_lengths err "'lots'"
run_tool bad_method "$config" --set sim.methods=collective+lb_mini
expect_rc bad_method 1
expect_in bad_method err "collective+lb_mini"
run_tool bad_method_equal "$config" --set sim.methods=collective+lb_mini_equal
expect_rc bad_method_equal 1
expect_in bad_method_equal err "collective+lb_mini_equal"
run_tool fit_calibrated "$config" --set sim.device=calibrated --set sim.calibration="$work/nope.json" \
  --set sim.compute_model=fit
expect_rc fit_calibrated 1
expect_in fit_calibrated err "sim.compute_model = fit models a named device"
run_tool bad_fit "$config" --set sim.compute_model=fit --set sim.fit=4.3,x,0.9
expect_rc bad_fit 1
expect_in bad_fit err "sim.fit: 'x' in '4.3,x,0.9' is not a number of seconds"
run_tool all_dropped "$config" --set "data.lengths=$lengths" --set data.max_length=50
expect_rc all_dropped 1
expect_in all_dropped err "every sequence is longer than data.max_length = 50"
run_tool nothing_kept "$config" --set "data.lengths=\"\"" --set data.mean_length=100 --set data.sigma=0.1 --set data.min_length=8192 \
  --set data.max_length=65536
expect_rc nothing_kept 1
expect_in nothing_kept err "keeps almost none of lognormal"
run_tool devices_out_of_range "$config" --set sim.devices=0
expect_rc devices_out_of_range 1
expect_in devices_out_of_range err "config key 'sim.devices' in --set must be in [1, 65536], found 0"
run_tool efficiency_out_of_range "$config" --set sim.matmul_efficiency=1.5
expect_rc efficiency_out_of_range 1
expect_in efficiency_out_of_range err "config key 'sim.matmul_efficiency' in --set must be in (0, 1], found 1.5"
run_tool bad_sharding "$config" --set sim.sharding=zero3
expect_rc bad_sharding 1
expect_in bad_sharding err "config key 'sim.sharding' in --set expects one of full, hybrid, hpz, found 'zero3'"
run_tool hybrid_partial_node "$config" --set sim.sharding=hybrid --set sim.devices=12
expect_rc hybrid_partial_node 1
expect_in hybrid_partial_node err "sim.sharding = hybrid needs whole nodes (every node holds a whole copy of the shards): sim.devices = 12 is not a multiple of sim.devices_per_node = 8"
run_tool bad_nccl_protocol "$config" --set sim.collective_model=nccl --set sim.nccl_protocols=ll,tree
expect_rc bad_nccl_protocol 1
expect_in bad_nccl_protocol err "sim.nccl_protocols: 'tree' is not an NCCL protocol (expected a comma-separated subset of ll, ll128, simple)"
run_tool nccl_calibrated "$config" --set sim.collective_model=nccl --set sim.device=calibrated --set sim.calibration=$work/nope.json
expect_rc nccl_calibrated 1
expect_in nccl_calibrated err "sim.collective_model = nccl models NCCL's collectives on GPUs"
run_tool bad_padding "$config" --set sim.collective_padding=zeros
expect_rc bad_padding 1
expect_in bad_padding err "config key 'sim.collective_padding' in --set expects one of empty, dummy, found 'zeros'"
run_tool unknown_key "$config" --set sim.devcies=4
expect_rc unknown_key 1
expect_in unknown_key err "sim.devcies"
run_tool missing_config "$work/nope.yaml"
expect_rc missing_config 1
expect_in missing_config err "nope.yaml"

finish_test "odc-sim CLI: all checks passed"

#!/usr/bin/env bash
# libFuzzer runs of the parsers that take untrusted files, one target per tests/fuzz/fuzz_NAME.cpp:
#   safetensors     the safetensors header/reader
#   tokenizer_json  the tokenizer.json loader
#   config_yaml     odc-train's CONFIG.yaml: YAML over the trainer schema's defaults, validation,
#                   model.config (also checks all-or-nothing loading and the dump round trip)
#   jsonl           the JSONL dataset readers: tokens, chat (llama3/chatml) and text (first input
#                   byte selects the format), each accepted dataset also converted to .bin/.idx
#   bin_index       the binary dataset reader (PREFIX.idx "ODCIDX" + PREFIX.bin), every claimed
#                   sequence read back
# Each target is built with clang (Debian's clang 14) under -fsanitize=fuzzer,address,undefined from
# its sources (one clang invocation per target), seeded from tests/fuzz/corpus/NAME (copied, so the
# seeds stay clean) and run for SECONDS. jsonl and bin_index write each input to a per-process
# scratch directory (tests/fuzz/fuzz_support.h: /dev/shm when writable, else $TMPDIR or /tmp).
# Prints one JSON line per target: executions, crashes found, corpus size; exits 1 on any crash
# (the reproducer is kept under OUT/NAME/ as crash-*), 2 on a usage error.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET=60] [OUT_DIR=build-fuzz] [TARGETS=all]
#   TARGETS: comma-separated names from the list above (e.g. config_yaml,jsonl), or "all".
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
out="${2:-$root/build-fuzz}"
selection="${3:-all}"
all_targets=(safetensors tokenizer_json config_yaml jsonl bin_index)
mkdir -p "$out"
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)"; exit 2; }

core=(src/core/dtype.cpp src/core/tensor.cpp src/core/atomic_file.cpp src/core/text.cpp)
tokenizer=$(cd "$root" && ls src/data/tokenizer*.cpp | tr '\n' ' ')
# The dataset readers reach the tokenizer (chat/text) and the binary format (open_dataset).
# (config_spec.cpp: closest_name, the "did you mean" of unknown record fields.)
datasets="src/data/dataset.cpp src/data/text_dataset.cpp src/data/bin_dataset.cpp src/data/chat_format.cpp $tokenizer"
datasets+=" src/core/config_spec.cpp"
# config_schema.cpp also reads checkpoint config.json files (io/hf_checkpoint.cpp and what it uses).
config="src/core/config.cpp src/train/config/config_schema.cpp src/model/llama_config.cpp src/model/units.cpp"
config+=" src/io/hf_checkpoint.cpp src/io/safetensors.cpp src/io/safetensors_sharded.cpp"
declare -A sources=(
  [safetensors]="src/io/safetensors.cpp src/io/safetensors_sharded.cpp ${core[*]}"
  [tokenizer_json]="$tokenizer ${core[*]}"
  [config_yaml]="$config ${core[*]}"
  [jsonl]="$datasets ${core[*]}"
  [bin_index]="$datasets ${core[*]}"
)
text_libs="-lfmt $(pkg-config --libs libpcre2-8 icu-uc)"
declare -A libs=([safetensors]="-lfmt" [tokenizer_json]="$text_libs" [config_yaml]="-lyaml-cpp -lspdlog -lfmt"
                 [jsonl]="$text_libs" [bin_index]="$text_libs")

targets=()
if [ "$selection" = all ]; then
  targets=("${all_targets[@]}")
else
  IFS=',' read -r -a targets <<<"$selection"
  for name in "${targets[@]}"; do
    [ -n "${sources[$name]+set}" ] || { echo "fuzz.sh: unknown target '$name' (targets: ${all_targets[*]})"; exit 2; }
  done
fi

status=0
for name in "${targets[@]}"; do
  bin="$out/fuzz_$name"
  srcs=()
  for s in ${sources[$name]}; do srcs+=("$root/$s"); done
  # shellcheck disable=SC2086
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root/src/data" "$root/tests/fuzz/fuzz_$name.cpp" "${srcs[@]}" ${libs[$name]} -o "$bin"
  work="$out/$name"
  rm -rf "$work" && mkdir -p "$work/corpus"
  [ -d "$root/tests/fuzz/corpus/$name" ] && cp "$root/tests/fuzz/corpus/$name"/* "$work/corpus/" 2>/dev/null || true
  set +e
  (cd "$work" && "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
     -print_final_stats=1 corpus >"$work/log.txt" 2>&1)
  rc=$?
  set -e
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$work/log.txt" | grep -Eo '[0-9]+$' || echo 0)
  crashes=$(ls "$work" | grep -cE '^(crash|leak|timeout|oom)-' || true)
  corpus=$(ls "$work/corpus" | wc -l)
  echo "{\"fuzz\": \"$name\", \"seconds\": $seconds, \"executions\": ${runs:-0}, \"crashes\": $crashes, \"exit\": $rc, \"corpus\": $corpus}"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    status=1
    tail -30 "$work/log.txt"
  fi
done
exit $status

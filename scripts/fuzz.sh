#!/usr/bin/env bash
# libFuzzer runs of the parsers that take untrusted files: the safetensors header/reader and the
# tokenizer.json loader (more targets: any tests/fuzz/fuzz_NAME.cpp listed below). Each target is
# built with clang (Debian's clang 14) under -fsanitize=fuzzer,address,undefined from its sources,
# seeded from tests/fuzz/corpus/NAME (copied, so the seeds stay clean) and run for SECONDS.
# Prints one JSON line per target: executions, crashes found, corpus size; exits 1 on any crash
# (the reproducer is kept under OUT/NAME/ as crash-*).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET=60] [OUT_DIR=build-fuzz]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
out="${2:-$root/build-fuzz}"
mkdir -p "$out"
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)"; exit 2; }

core=(src/core/dtype.cpp src/core/tensor.cpp src/core/atomic_file.cpp)
declare -A sources=(
  [safetensors]="src/io/safetensors.cpp src/io/safetensors_sharded.cpp ${core[*]}"
  [tokenizer_json]="$(cd "$root" && ls src/data/tokenizer*.cpp | tr '\n' ' ') ${core[*]}"
)
declare -A libs=([safetensors]="-lfmt" [tokenizer_json]="-lfmt $(pkg-config --libs libpcre2-8 icu-uc)")

status=0
for name in safetensors tokenizer_json; do
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

#!/usr/bin/env bash
# Builds here what the GPU check runs on a lent GPU machine, which has CUDA, PyTorch and a driver
# but none of this project's other dependencies and no package registry: the CUDA test and
# benchmark programs and the single-GPU trainer, stripped, with every shared library they load
# that such a machine may lack (ldd), the check script and its Python peers, the commit and a
# manifest, packed as one xz archive.
#
#   scripts/gpu-bundle.sh [--build-dir DIR] [--max-mib N] [OUT]
#
#   OUT          the archive (default gpu-bundle/odc-gpu-bundle.tar.xz; gpu-bundle/ is ignored by git)
#   --build-dir  a build with the CUDA backend (default build/, configured and built when needed)
#   --max-mib    refuse an archive larger than this (default 48: the lent machine takes at most
#                64 MiB of working tree and carried files together)
#   ODC_XZ_LEVEL  xz preset (default 6; the CI test uses 1: faster, a few MiB larger)
#
# Left out on purpose (the lent machine has its own, matched to its driver): the glibc family and
# the CUDA libraries (libcuda, libcudart, libcublas(Lt), libnccl, libcudnn, ...). gpu-check.sh
# finds those there, in /usr/local/cuda or PyTorch's nvidia-* packages.
# Exit: 0 with the archive written, 1 on a failure (named), 2 on a usage error.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
max_mib=48
out="$root/gpu-bundle/odc-gpu-bundle.tar.xz"
usage() { echo "usage: scripts/gpu-bundle.sh [--build-dir DIR] [--max-mib N] [OUT]" >&2; exit 2; }
die() { echo "gpu-bundle: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || usage; build="$2"; shift 2 ;;
    --max-mib) [ $# -ge 2 ] || usage; [[ "$2" =~ ^[0-9]+$ ]] || usage; max_mib="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-bundle: unknown option '$1'" >&2; usage ;;
    *) out="$1"; shift ;;
  esac
done

# The programs of the check (bench/ and tests/cuda/ describe each).
programs=(odc_cuda_tests gpu_ceilings gpu_nccl gpu_gemm gpu_attention gpu_model_parity gpu_model_throughput odc-train
          odc-run comm_bandwidth rollout_throughput)
python_peers=(bench/gpu_attention_torch.py bench/gpu_model_torch.py scripts/gpu_check_summary.py
              scripts/gpu_check_train.py scripts/gpu_check_ipc.py scripts/gpu_check_context.py)

if [ ! -f "$build/CMakeCache.txt" ]; then
  ODC_BUILD_DIR="$build" ODC_BUILD_TARGETS="${programs[*]}" "$root/scripts/build.sh" -DODC_CUDA=ON
fi
grep -q '^ODC_CUDA:STRING=OFF' "$build/CMakeCache.txt" && die "$build is configured with ODC_CUDA=OFF; use a CUDA build (--build-dir)"
targets=()
for p in "${programs[@]}" odc-data; do targets+=(--target "$p"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}" >/dev/null || die "building ${programs[*]} in $build failed"
# The kernels must hold machine code for the H200 (sm_90a): PTX of another target alone would be
# JIT-compiled there, slowly and not as measured here.
grep -q -- 'code=\[\?[a-z_0-9,]*sm_90' "$build/build.ninja" \
  || die "$build does not compile the kernels for sm_90 (CMAKE_CUDA_ARCHITECTURES must include 90a, the H200's)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
b="$stage/odc-gpu"
mkdir -p "$b/bin" "$b/lib" "$b/py" "$b/configs" "$b/data"
for p in "${programs[@]}"; do
  [ -x "$build/bin/$p" ] || die "$build/bin/$p was not built"
  strip -o "$b/bin/$p" "$build/bin/$p"
done
for f in "${python_peers[@]}"; do cp "$root/$f" "$b/py/"; done
cp "$root/scripts/gpu-check.sh" "$b/gpu-check.sh"
# The trainer step's job: its config and synthetic SFT data (long-tailed lengths, 4 tasks); the
# ipc-train and context steps train the same data (context: its longest sequence fixes the caps).
cp "$root/configs/gpu-check-train.yaml" "$root/configs/gpu-check-ipc.yaml" "$root/configs/gpu-check-rl.yaml" \
  "$root/configs/gpu-check-context.yaml" "$b/configs/"
"$build/bin/odc-data" synth --out "$b/data/gpu-train.jsonl" --num 512 --vocab 32 --min-length 16 \
  --max-length 512 --mean-length 96 --seed 7 >/dev/null || die "odc-data synth failed"

# The rl step's prompts and tokenizer: the demo's tasks with their answers, its chat tokenizer.
/usr/bin/python3 "$root/tools/make_demo_chat.py" --out "$stage/chat" --num 64 --merges 40 --seed 1 >/dev/null ||
  die "tools/make_demo_chat.py failed"
mkdir -p "$b/data/tokenizer" && cp "$stage/chat/tokenizer/"* "$b/data/tokenizer/"
/usr/bin/python3 - "$stage/chat/chat.jsonl" "$b/data/rl-prompts.jsonl" <<'PY' || die "the rl prompts"
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        m = json.loads(line)["messages"]
        out.write(json.dumps({"prompt": m[-2]["content"], "answer": m[-1]["content"]}) + "\n")
PY

# Shared libraries: everything ldd resolves except the glibc family and CUDA's own.
host_provided='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libutil\.|libcuda\.|libcudart\.|libcublas|libnccl\.|libcudnn|libnvrtc|libnvJitLink|libcufile)'
declare -A seen=()
host_libs=()
for p in "${programs[@]}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ "$path" = "not" ] && die "$p needs $name, which ldd cannot find here"
    if [[ "$name" =~ $host_provided ]]; then
      [[ "$name" =~ ^(libcudart|libcublas|libnccl|libcudnn) ]] && host_libs+=("$name")
      continue
    fi
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    cp -L "$path" "$b/lib/$name"
  done < <(ldd "$build/bin/$p")
done
# ICU's data is inside its library and oneDNN generates its kernels at run time; nothing else is
# dlopen'ed by the programs of the check (UCX and MPI plugins are only loaded by MPI_Init, which they never call).

commit="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$root" status --porcelain 2>/dev/null | { grep -cv '^??' || true; })"
printf '%s%s\n' "$commit" "$([ "$dirty" -gt 0 ] && echo " (with $dirty uncommitted changes)")" >"$b/COMMIT"
host_list="$(printf '%s\n' "${host_libs[@]+"${host_libs[@]}"}" | sort -u | paste -sd, -)"
python3 - "$b/BUNDLE.json" "$commit" "$host_list" "${programs[@]}" <<'PY'
import json, sys
path, commit, host, *programs = sys.argv[1:]
json.dump({"commit": commit, "programs": programs, "cuda_arch": "sm_90a",
           "host_libraries": [h for h in host.split(",") if h]}, open(path, "w"), indent=1)
PY
(cd "$b" && find . -type f ! -name MANIFEST.sha256 -print0 | sort -z | xargs -0 sha256sum >MANIFEST.sha256)

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - odc-gpu | xz -T0 "-${ODC_XZ_LEVEL:-6}" >"$out.part"
mv "$out.part" "$out"
bytes=$(stat -c %s "$out")
raw=$(du -sb "$b" | cut -f1)
max_bytes=$((max_mib * 1024 * 1024))
printf '{"bench":"gpu_bundle","archive":"%s","bytes":%d,"unpacked_bytes":%d,"files":%d,"commit":"%s"}\n' \
  "$out" "$bytes" "$raw" "$(find "$b" -type f | wc -l)" "$commit"
[ "$bytes" -le "$max_bytes" ] || die "the archive is $bytes bytes, over the ${max_mib} MiB budget"

#!/usr/bin/env bash
# The README's command blocks (and docs/checkpoints.md's) run as printed, in a directory laid out like a fresh clone (build/,
# configs/, tools/ linked in; no data/ or models/ yet): the "Using it" block (synthetic data,
# ODC and collective training, --dump-config) and the "Checkpoints, evaluation and generation"
# block (demo chat data and tokenizer, odc-ckpt init, fine-tune with checkpoints and export,
# odc-eval, odc-generate, odc-ckpt export). Each block runs with `bash -euo pipefail`, so every
# command must exit 0; then the files each flow promises must exist.
# Only the run length is shortened, through the environment the config engine reads (YAML <
# environment < --set): 30 steps of 2 sequences per rank (the checkpoint block's run then saves its
# checkpoint at its end, step 30, which its export reads).
# Usage: test_readme_flows.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
mkdir -p "$work/clone/build"
clone="$work/clone"
ln -s "$bin" "$clone/build/bin"
ln -s "$root/configs" "$clone/configs"
ln -s "$root/tools" "$clone/tools"
# Not mpirun's root permission: the README's first block sets it, as a root user pasting it needs
# (ctest's environment has it; the blocks run in one shell each, so the later block gets it here).
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ODC_TRAIN_STEPS=30 ODC_DATA_MINIBATCH_SIZE=2 ODC_TRAIN_LOG_EVERY=10

block() {  # block HEADING [FILE]: the first ```sh block after the heading HEADING of FILE (README.md)
  awk -v heading="$1" '$0 == heading {found = 1; next} found && /^```sh/ {inside = 1; next}
                       inside && /^```/ {exit} inside {print}' "$root/${2:-README.md}"
}

run_block() {  # run_block NAME HEADING [FILE]
  local script="$work/$1.sh"
  block "$2" "${3:-README.md}" >"$script"
  [ -s "$script" ] || { fail "$1: no sh block under '$2' in ${3:-README.md}"; return 1; }
  ( cd "$clone" && bash -euo pipefail "$script" ) >"$work/$1.log" 2>&1 ||
    { fail "$1: a command failed: $(grep -v '\] step ' "$work/$1.log" | tail -5)"; return 1; }
  echo "ok   $1: $(grep -c . "$script") lines of README commands ran"
}

if run_block using "## Using it"; then
  [ -s "$clone/data/train.jsonl" ] || fail "using: no data/train.jsonl"
  grep -q "train.comm" "$work/using.log" || fail "using: --dump-config printed no train.comm"
fi
# The later blocks assume the first block's root permission for mpirun (the README says so).
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if run_block checkpoints "## Checkpoints, evaluation and generation"; then
  for f in data/chat/chat.jsonl data/chat/tokenizer/tokenizer.json models/tiny/config.json models/tiny/tokenizer.json \
           ckpt/step-00000030/manifest.json models/tiny-sft/config.json models/tiny-sft/tokenizer.json \
           models/from-ckpt/config.json models/from-ckpt/tokenizer.json; do
    [ -e "$clone/$f" ] || fail "checkpoints: no $f"
  done
  grep -q '"perplexity"' "$work/checkpoints.log" || fail "checkpoints: odc-eval printed no perplexity"
fi
# docs/checkpoints.md's first block runs after the README's, as it says, and leaves their models alone.
if run_block checkpoints_doc "## Starting from a Hugging Face checkpoint" docs/checkpoints.md; then
  for f in models/tiny-32/config.json models/tiny-32-sft/config.json models/tiny/tokenizer.json; do
    [ -e "$clone/$f" ] || fail "checkpoints_doc: no $f"
  done
  grep -q '"perplexity"' "$work/checkpoints_doc.log" || fail "checkpoints_doc: odc-eval printed no perplexity"
fi
finish_test "the README's and docs/checkpoints.md's flows run as printed in a fresh layout"

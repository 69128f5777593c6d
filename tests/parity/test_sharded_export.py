#!/usr/bin/python3
"""A sharded, streamed export read back by Hugging Face transformers: a Qwen2 model transformers
makes is fine-tuned by odc-train on 2 MPI ranks and exported with checkpoint.export_hf in shards
small enough for every layer to get a file of its own (checkpoint.export_shard_bytes), so both
ranks write files; then

    python test_sharded_export.py --dump build/bin/odc_parity_dump --workdir DIR

  1. the export is sharded: model.safetensors.index.json names every tensor, each shard file holds
     whole units (no unit's tensors in two files), and there are at least 5 shards;
  2. `AutoModelForCausalLM.from_pretrained` loads it with no missing, unexpected or mismatched key;
  3. transformers' loss on the training data (mean next-token cross-entropy over the loss_mask
     positions, computed in float64) equals odc-eval's on the same file within TOL_LOSS, and
     odc-eval's equals the run's own evaluation of the trained model at its end (data.eval, the
     same file, on the 2 ranks' shards) within TOL_SAME: the export is the trained model, not the
     base (whose loss differs by more than 100 x TOL_SAME, checked);
  4. `odc-ckpt export --max-shard-bytes` of the run's native checkpoint (streamed from the 2 ranks'
     files) writes the same safetensors files and index, byte for byte.

Needs transformers (the Python environment of scripts/setup.sh): without it the test exits 77,
which ctest reports as skipped, and says why.

Tolerances: TOL_SAME = 1e-6 relative between two fp32 evaluations of the same weights here (the
run's over its microbatches on 2 ranks, odc-eval's in one process): the same kernels, sums in
another order (~1e-7). TOL_LOSS: |transformers - odc-eval| / odc-eval <= 1e-5. Both score the very same fp32 weights;
transformers runs in float64, odc-eval in fp32, whose per-operation rounding (~6e-8 relative)
accumulated over 4 layers and sums of <= 256 terms moves a token's loss by ~1e-6 relative, and
the mean over ~thousands of tokens averages it further. A wrong or misplaced tensor (a shard
mapped to the wrong file, a piece written at the wrong offset) changes the loss by far more than
1e-3.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM
except ImportError as exc:  # reported as skipped by ctest, never as a pass
    print(f"SKIPPED: the sharded export test needs torch, safetensors and transformers ({exc}); "
          "run scripts/setup.sh for the Python environment")
    sys.exit(77)

TOL_LOSS = 1e-5
TOL_SAME = 1e-6
VOCAB = 512
LAYERS = 4
# Each decoder layer is 591 KB in float32 (hidden 128, intermediate 256): shards of 700 KB hold one
# layer each, the embedding (262 KB) alone too, the last layer with the head's norm: the 6 units
# make 5 files, 3 written by rank 0 and 2 by rank 1.
SHARD_BYTES = 700_000
SHAPE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=LAYERS, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.05, vocab_size=VOCAB,
             tie_word_embeddings=True)


def run(cmd, what, failures, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        failures.append(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
        return None
    return proc.stdout + proc.stderr


def unit_of(name):
    """The unit a tensor belongs to: embedding, layer.N or head (include/odc/model/units.h)."""
    if name.startswith("model.layers."):
        return "layer." + name.split(".")[2]
    return "embedding" if name.startswith("model.embed_tokens") else "head"


def check_sharding(export, failures):
    index_path = os.path.join(export, "model.safetensors.index.json")
    if not os.path.exists(index_path):
        failures.append(f"no index in {export}: {sorted(os.listdir(export))}")
        return 0
    with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    files_of_unit = {}
    for name, file in weight_map.items():
        files_of_unit.setdefault(unit_of(name), set()).add(file)
        with safe_open(os.path.join(export, file), "pt") as shard:
            if name not in shard.keys():
                failures.append(f"the index maps {name} to {file}, which does not hold it")
    split = {unit: sorted(files) for unit, files in files_of_unit.items() if len(files) > 1}
    if split:
        failures.append(f"units split over files: {split}")
    files = sorted(set(weight_map.values()))
    if len(files) < 5:
        failures.append(f"expected at least 5 shards at {SHARD_BYTES} bytes, found {files}")
    return len(files)


def hf_loss(model, data_path):
    """Mean next-token cross-entropy over the loss_mask positions (loss_mask[i] = 1: token i is a target)."""
    total, count = 0.0, 0
    with open(data_path) as f:
        for line in f:
            record = json.loads(line)
            ids = torch.tensor([record["input_ids"]])
            mask = torch.tensor(record["loss_mask"][1:], dtype=torch.bool)
            with torch.no_grad():
                logits = model(ids).logits[0, :-1].double()
            nll = -torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
            total += float(nll[mask].sum())
            count += int(mask.sum())
    return total / count, count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="path to odc_parity_dump (its directory holds the tools)")
    parser.add_argument("--workdir", required=True, help="scratch directory")
    args = parser.parse_args()
    bin_dir = os.path.dirname(os.path.abspath(args.dump))
    tools = {t: os.path.join(bin_dir, t) for t in ("odc-train", "odc-eval", "odc-ckpt", "odc-data")}
    for tool in tools.values():
        if not os.access(tool, os.X_OK):
            print(f"FAILED: {tool} is missing (build the odc-train, odc-eval, odc-ckpt and odc-data targets)",
                  file=sys.stderr)
            return 1
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    failures = []
    base, export = os.path.join(args.workdir, "base"), os.path.join(args.workdir, "export")
    data = os.path.join(args.workdir, "data.jsonl")

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(transformers.Qwen2Config(**SHAPE), dtype=torch.float32).save_pretrained(base)
    if run([tools["odc-data"], "synth", "--out", data, "--num", "120", "--vocab", str(VOCAB), "--max-length", "96",
            "--mean-length", "48", "--seed", "2"], "odc-data synth", failures) is None:
        print("\n".join(failures), file=sys.stderr)
        return 1
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    log = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", tools["odc-train"],
               "--set", f"data.train={data}", "--set", f"model.checkpoint={base}", "--set", "train.steps=6",
               "--set", "train.lr=3e-3", "--set", "data.minibatch_size=4", "--set", "train.peak_flops=1e10",
               "--set", f"checkpoint.dir={args.workdir}/ckpt", "--set", f"checkpoint.export_hf={export}",
               "--set", "checkpoint.export_dtype=float32", "--set", f"checkpoint.export_shard_bytes={SHARD_BYTES}",
               "--set", f"data.eval={data}", "--set", f"train.metrics_file={args.workdir}/metrics.jsonl"],
              "odc-train on 2 ranks", failures, env=env)
    if log is None:
        print("\n".join(failures), file=sys.stderr)
        return 1
    print("\n".join(line for line in log.splitlines() if "export:" in line))

    shards = check_sharding(export, failures)
    model, info = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        failures.append(f"transformers loading the export: {problems}")
    theirs, tokens = hf_loss(model.double().eval(), data)
    out = run([tools["odc-eval"], "--model", export, "--data", data], "odc-eval", failures)
    if out is not None:
        ours = json.loads(out)
        error = abs(theirs - ours["loss"]) / ours["loss"]
        print(f"{shards} shards; loss over {tokens} target tokens: transformers (float64) {theirs:.9f}, "
              f"odc-eval {ours['loss']:.9f}, relative difference {error:.2e} (bound {TOL_LOSS:.0e})")
        if ours["tokens"] != tokens:
            failures.append(f"odc-eval scored {ours['tokens']} tokens, transformers {tokens}")
        if not error <= TOL_LOSS:
            failures.append(f"losses differ by {error:.2e} relative, above {TOL_LOSS:.0e}")
        with open(f"{args.workdir}/metrics.jsonl") as f:
            trained = [json.loads(line)["eval_loss"] for line in f if "eval_loss" in line][-1]
        base_out = run([tools["odc-eval"], "--model", base, "--data", data], "odc-eval of the base", failures)
        base_loss = json.loads(base_out)["loss"] if base_out else float("nan")
        same = abs(ours["loss"] - trained) / trained
        print(f"the run's own evaluation of the trained model {trained:.9f} (relative difference {same:.2e}, bound "
              f"{TOL_SAME:.0e}); the base model {base_loss:.9f}")
        if not same <= TOL_SAME:
            failures.append(f"the export's loss {ours['loss']} is not the trained model's {trained} ({same:.2e})")
        if not abs(base_loss - trained) / trained > 100 * TOL_SAME:
            failures.append(f"the base model's loss {base_loss} is the trained one's {trained}: the check shows nothing")

    native = os.path.join(args.workdir, "from-native")
    if run([tools["odc-ckpt"], "export", "--from", f"{args.workdir}/ckpt", "--out", native, "--dtype", "f32",
            "--max-shard-bytes", str(SHARD_BYTES)], "odc-ckpt export", failures) is not None:
        # config.json and generation_config.json follow the base model's files, which only the
        # trainer's export is given; the weights must be the same bytes.
        weights = sorted(n for n in os.listdir(export) if n.startswith("model"))
        theirs_files = sorted(n for n in os.listdir(native) if n.startswith("model"))
        if weights != theirs_files:
            failures.append(f"odc-ckpt export wrote {theirs_files}, the trainer {weights}")
        else:
            for name in weights:
                with open(os.path.join(export, name), "rb") as a, open(os.path.join(native, name), "rb") as b:
                    if a.read() != b.read():
                        failures.append(f"odc-ckpt export's {name} differs from the trainer's")
            print(f"odc-ckpt export of the native checkpoint: the same {len(weights)} weight files, byte for byte")

    if failures:
        print("\nFAILED:", file=sys.stderr)
        for failure in failures:
            print("  " + failure, file=sys.stderr)
        return 1
    print("\nsharded export: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

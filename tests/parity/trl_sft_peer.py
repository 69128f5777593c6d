#!/usr/bin/env python3
"""SFT against TRL's SFTTrainer: the same model, data, masks and hyper-parameters, step by step.

One tiny LLaMA created by transformers (random init, save_pretrained, fp32) with a byte-level BPE
tokenizer made locally (tools/make_demo_chat.py), and multi-turn chat data (1-3 user/assistant
rounds, half with a system turn). Loss on assistant turns only, on both sides:
  ours  data.format chat (ChatML rendered natively; targets: the content and <|im_end|> of each
        assistant turn);
  TRL   a conversational dataset with assistant_only_loss=True and the same ChatML template with
        {% generation %} markers around exactly those characters.
Before training, the sequences are checked to be IDENTICAL: TRL's prepared input_ids and
(labels != -100) against ours (`odc-data convert --format chat`, the reader training uses), then
per step the loss-token counts (ours' metrics against TRL's labels in the order it trains).

Runs: TRL SFTTrainer on the torch CPU in fp32, and odc-train on 1 rank, on 2 ranks with
train.comm=odc and with train.comm=collective (under mpirun). Compared per step: loss, grad norm
(before clipping), lr; at the end, every tensor of TRL's saved model against our export
(checkpoint.export_hf) as the relative error of the training update, |dW_ours - dW_trl| / |dW_trl|
with dW = final - initial (a stricter measure than the weights themselves, which barely move).
A control run (ours with train.loss_reduction=sequence) must miss the tolerance: the comparison
sees a change of loss normalisation.

Tolerances (fp32 on both sides; only the summation order differs: GEMM blocking, attention,
cross-entropy, the order gradients of microbatches and ranks are added): loss 1e-5 and grad norm
1e-4 relative per step, lr 1e-9; update error 1e-3 per tensor. Measured: loss <= ~2e-7, update
<= ~5e-5 (docs/training.md, "Against TRL's SFTTrainer").

Settings mapped (ours -> TRL): train.lr -> learning_rate; train.schedule cosine + train.min_lr ->
lr_scheduler_type cosine_with_min_lr + lr_scheduler_kwargs.min_lr; train.warmup_steps 5 with
train.warmup_start zero -> warmup_steps 5 (transformers' warmup is lr * s / W: step 0 trains at lr
0; ours by default lr * (s + 1) / W, hence the key); train.weight_decay,
beta1, beta2, eps -> weight_decay, adam_beta1, adam_beta2, adam_epsilon (both decay matrices and
embeddings, not norms or biases); train.grad_clip -> max_grad_norm; data.global_batch_size 8 ->
per_device_train_batch_size 2 x gradient_accumulation_steps 4; train.steps -> max_steps;
data.shuffle false -> train_sampling_strategy sequential; model.dtype float32 -> bf16 False (TRL's
default is True); and against TRL's other defaults: activation_checkpointing False (numerically the
same, slower) and max_length None (TRL truncates at 1024 tokens by default).

usage: trl_sft_peer.py [--bin build/bin] [--out bench-out/trl_sft_peer] [--steps 30]
                       [--mpirun mpirun] [--ranks 2]
Prints the table, writes OUT/results.json, OUT/table.md and OUT/loss.png.
Exit 0 within tolerance, 1 outside it (or a failure), 77 skipped (torch, transformers, trl or
datasets cannot be imported: the Python environment of scripts/setup.sh is missing).
"""
import argparse
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

SKIPPED = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/parity/..
LOSS_RTOL, GRAD_NORM_RTOL, LR_RTOL, UPDATE_RTOL = 1e-5, 1e-4, 1e-9, 1e-3

# ChatML as ours renders it; the generation markers cover what ours targets (content + <|im_end|>,
# not the newline after it), so TRL's assistant mask is ours by construction (and checked).
CHATML_WITH_GENERATION = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# One set of hyper-parameters; each side's names are derived from it below.
# Warmup as transformers has it (lr * s / W, step 0 at lr 0): ours with train.warmup_start zero.
HYPER = {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
         "grad_clip": 1.0, "per_device_batch": 2, "accumulation": 4, "seed": 0}
MODEL = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": False}


def global_batch():
    return HYPER["per_device_batch"] * HYPER["accumulation"]


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


# ---- fixtures: tokenizer, model, data ----

def make_fixtures(out, sequences, seed):
    """Tokenizer (make_demo_chat.py), multi-turn chat data and a random HF LLaMA saved by transformers."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    fixture = os.path.join(out, "fixture")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_demo_chat.py"), "--out", fixture,
                    "--num", "2000", "--merges", "120", "--seed", str(seed + 1)],
                   check=True, stdout=subprocess.DEVNULL)
    spec = importlib.util.spec_from_file_location("make_demo_chat", os.path.join(ROOT, "tools", "make_demo_chat.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    rng = random.Random(seed)
    chat = os.path.join(out, "chat.jsonl")
    with open(chat, "w") as f:
        for _ in range(sequences):
            messages = [{"role": "system", "content": "You are a helpful assistant."}] if rng.random() < 0.5 else []
            for _ in range(rng.choice([1, 1, 2, 3])):  # several assistant turns: several masked spans
                messages += demo.conversation(rng)[-2:]
            f.write(json.dumps({"messages": messages}) + "\n")

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(fixture, "tokenizer", "tokenizer.json"),
                                        eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML_WITH_GENERATION
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), **MODEL))
    model_dir = os.path.join(out, "model")
    model.save_pretrained(model_dir)  # fp32 safetensors: the initial weights of both sides
    tokenizer.save_pretrained(model_dir)
    return model_dir, chat


# ---- the TRL side ----

def run_trl(model_dir, chat, out, steps):
    """SFTTrainer on the CPU in fp32; returns per-step records, the prepared dataset and the saved model."""
    import datasets
    import transformers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    tokenizer.chat_template = CHATML_WITH_GENERATION  # also saved next to the model; set for clarity
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    with open(chat) as f:
        records = [json.loads(line) for line in f]
    args = SFTConfig(
        output_dir=os.path.join(out, "trl"), max_steps=steps, seed=HYPER["seed"],
        per_device_train_batch_size=HYPER["per_device_batch"], gradient_accumulation_steps=HYPER["accumulation"],
        learning_rate=HYPER["lr"], lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr": HYPER["min_lr"]}, warmup_steps=HYPER["warmup_steps"],
        weight_decay=HYPER["weight_decay"], adam_beta1=HYPER["beta1"], adam_beta2=HYPER["beta2"],
        adam_epsilon=HYPER["eps"], max_grad_norm=HYPER["grad_clip"],
        train_sampling_strategy="sequential", assistant_only_loss=True, max_length=None, packing=False,
        bf16=False, use_cpu=True, activation_checkpointing=False,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(records),
                         processing_class=tokenizer)
    trainer.remove_callback(transformers.PrinterCallback)  # its log lines would bury the table
    prepared = [(row["input_ids"], [int(label != -100) for label in row["labels"]]) for row in trainer.train_dataset]
    started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - started
    final_dir = os.path.join(out, "trl-final")
    trainer.save_model(final_dir)
    steps_logged = [{"step": h["step"], "loss": h["loss"], "grad_norm": h["grad_norm"], "lr": h["learning_rate"]}
                    for h in trainer.state.log_history if "loss" in h]
    return steps_logged, prepared, final_dir, seconds


# ---- our side ----

def read_bin_dataset(prefix):
    """(input_ids, loss_mask) per sequence of an odc-data bin dataset (include/odc/data/bin_dataset.h)."""
    import numpy as np
    with open(prefix + ".idx", "rb") as f:
        index = f.read()
    if index[:8] != b"ODCIDX\x01\x00":
        raise SystemExit(f"{prefix}.idx: not an odc bin index")
    version = int(np.frombuffer(index, dtype="<u4", count=1, offset=8)[0])
    count, _, spans_total = np.frombuffer(index, dtype="<i8", count=3, offset=16)
    at = 48 if version == 1 else 56  # version 2 adds the payload checksums' chunk size to the header
    token_offsets = np.frombuffer(index, dtype="<i8", count=count + 1, offset=at)
    span_offsets = np.frombuffer(index, dtype="<i8", count=count + 1, offset=at + 8 * (count + 1))
    spans = np.frombuffer(index, dtype="<u4", count=2 * spans_total, offset=at + 16 * (count + 1)).reshape(-1, 2)
    tokens = np.fromfile(prefix + ".bin", dtype="<u4")
    sequences = []
    for s in range(count):
        ids = tokens[token_offsets[s]:token_offsets[s + 1]].tolist()
        mask = [0] * len(ids)
        for start, length in spans[span_offsets[s]:span_offsets[s + 1]]:
            mask[start:start + length] = [1] * int(length)
        sequences.append((ids, mask))
    return sequences


def write_config(path, model_dir, chat, steps):
    """Our run's YAML: the same HYPER as TRL's SFTConfig, in our key names."""
    lines = ["# Written by tests/parity/trl_sft_peer.py: the settings TRL's SFTTrainer gets, in odc-train's keys.",
             "model:", f"  checkpoint: {model_dir}", "  dtype: float32",
             "data:", f"  train: {chat}", "  format: chat", "  chat_template: chatml", "  shuffle: false",
             f"  global_batch_size: {global_batch()}",
             "train:", f"  steps: {steps}", f"  lr: {HYPER['lr']!r}", f"  min_lr: {HYPER['min_lr']!r}",
             "  schedule: cosine", f"  warmup_steps: {HYPER['warmup_steps']}", "  warmup_start: zero",
             "  loss_reduction: token",
             f"  weight_decay: {HYPER['weight_decay']!r}", f"  beta1: {HYPER['beta1']!r}",
             f"  beta2: {HYPER['beta2']!r}", f"  eps: {HYPER['eps']!r}", f"  grad_clip: {HYPER['grad_clip']!r}",
             "  log_every: 10"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run_ours(binaries, config, out, name, ranks, mpirun, overrides=()):
    """odc-train on `ranks` ranks; returns its per-step metrics and its HF export directory."""
    metrics, export = os.path.join(out, f"{name}.metrics.jsonl"), os.path.join(out, f"{name}-final")
    shutil.rmtree(export, ignore_errors=True)  # a rerun must not compare an older export or metrics
    if os.path.exists(metrics):
        os.remove(metrics)
    command = [os.path.join(binaries, "odc-train"), config, "--set", f"train.metrics_file={metrics}",
               "--set", f"checkpoint.export_hf={export}"] + [a for o in overrides for a in ("--set", o)]
    if ranks > 1:
        command = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] + command
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    started = time.monotonic()
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: odc-train failed (exit {done.returncode}):\n{done.stdout[-4000:]}")
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return records, export, time.monotonic() - started


# ---- checks ----

def check_same_sequences(trl_prepared, ours_sequences, tokenizer_decode):
    """Identical input_ids and loss masks, sequence by sequence; a difference names the first one."""
    if len(trl_prepared) != len(ours_sequences):
        return [f"TRL prepared {len(trl_prepared)} sequences, ours {len(ours_sequences)}"]
    for i, ((trl_ids, trl_mask), (ids, mask)) in enumerate(zip(trl_prepared, ours_sequences)):
        if trl_ids != ids:
            at = next((j for j, (x, y) in enumerate(zip(ids, trl_ids)) if x != y), min(len(ids), len(trl_ids)))
            theirs, mine = trl_ids[at:at + 8], ids[at:at + 8]
            return [f"sequence {i}: token ids differ from position {at}: TRL {theirs} "
                    f"({tokenizer_decode(theirs)!r}), ours {mine} ({tokenizer_decode(mine)!r})"]
        # Position 0 is never a target on either side (nothing predicts it): compare from 1.
        if trl_mask[1:] != mask[1:]:
            at = next(j for j in range(1, len(mask)) if mask[j] != trl_mask[j])
            return [f"sequence {i}: loss masks differ at position {at} (token {ids[at]} "
                    f"{tokenizer_decode([ids[at]])!r}): TRL {trl_mask[at]}, ours {mask[at]}"]
    return []


def step_targets(sequences, steps):
    """Loss tokens per optimizer step when sequences are read in order, G at a time."""
    g = global_batch()
    return [sum(sum(mask[1:]) for _, mask in sequences[s * g:(s + 1) * g]) for s in range(steps)]


def compare_steps(trl_steps, ours, expected_targets, steps, worst):
    """Per step and run: loss tokens exactly, loss, grad norm and lr within tolerance; fills `worst`."""
    failures = [] if len(trl_steps) == steps else [f"TRL logged {len(trl_steps)} steps, expected {steps}"]
    worst.update(loss_rel=0.0, grad_norm_rel=0.0, lr_rel=0.0)
    for name, run in ours.items():
        if len(run) != steps:
            failures.append(f"{name}: {len(run)} metrics lines, expected {steps}")
            continue
        for s, (mine, theirs) in enumerate(zip(run, trl_steps)):
            if int(mine["target_tokens"]) != expected_targets[s]:
                failures.append(f"{name} step {s + 1}: {int(mine['target_tokens'])} loss tokens, TRL's step has "
                                f"{expected_targets[s]} (a different order or mask)")
            for key, tolerance in (("loss", LOSS_RTOL), ("grad_norm", GRAD_NORM_RTOL), ("lr", LR_RTOL)):
                diff = relative(mine[key], theirs[key])
                worst[key + "_rel"] = max(worst[key + "_rel"], diff)
                if diff > tolerance:
                    failures.append(f"{name} step {s + 1}: {key} {mine[key]!r} vs TRL {theirs[key]!r} "
                                    f"(relative {diff:.2e} > {tolerance:g})")
    return failures


def compare_weights(initial_dir, trl_dir, ours_dir):
    """Per tensor: max |W_ours - W_trl| and |dW_ours - dW_trl| / |dW_trl| (dW = final - initial)."""
    import numpy as np
    from safetensors.numpy import load_file

    def load(directory):
        tensors = {}
        for name in sorted(os.listdir(directory)):
            if name.endswith(".safetensors"):
                tensors.update(load_file(os.path.join(directory, name)))
        return tensors

    initial, trl, ours = load(initial_dir), load(trl_dir), load(ours_dir)
    if set(trl) != set(ours):
        raise SystemExit(f"{ours_dir}: tensor names differ from TRL's: {sorted(set(trl) ^ set(ours))}")
    rows = {}
    for name in sorted(trl):
        a, b, w0 = ours[name].astype(np.float64), trl[name].astype(np.float64), initial[name].astype(np.float64)
        update_trl = np.linalg.norm(b - w0)
        error = np.linalg.norm(a - b) / update_trl if update_trl > 0 else (0.0 if np.array_equal(a, b) else math.inf)
        rows[name] = {"max_abs": float(np.abs(a - b).max()), "update_rel": float(error),
                      "update_norm": float(update_trl)}
    return rows


# ---- report ----

def table(trl, ours, names):
    lines = ["| step | TRL loss | " + " | ".join(names) + " | max rel. diff |",
             "|---:|---:|" + "---:|" * len(names) + "---:|"]
    for s, t in enumerate(trl):
        values = [runs[s]["loss"] for runs in ours]
        worst = max(relative(v, t["loss"]) for v in values)
        cells = " | ".join(f"{v:.7f}" for v in values)
        lines.append(f"| {t['step']} | {t['loss']:.7f} | {cells} | {worst:.1e} |")
    return "\n".join(lines)


def plot(results_path, png):
    """Loss curves (left) and each run's relative difference to TRL per step (right)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(results_path) as f:
        results = json.load(f)
    steps = [r["step"] for r in results["trl"]]
    trl = [r["loss"] for r in results["trl"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), dpi=120)
    left.plot(steps, trl, color="black", linewidth=3.0, alpha=0.35, label="TRL SFTTrainer (torch CPU, fp32)")
    for name, run in results["ours"].items():
        losses = [r["loss"] for r in run][:len(steps)]
        left.plot(steps, losses, linewidth=1.0, marker=".", label=f"odc-train {name}")
        right.semilogy(steps, [max(relative(a, b), 1e-12) for a, b in zip(losses, trl)], marker=".", label=name)
    right.axhline(results["tolerance"]["loss_rel"], color="red", linestyle="--", linewidth=1, label="tolerance")
    left.set(xlabel="optimizer step", ylabel="loss (token mean, assistant turns)", title="loss per step")
    right.set(xlabel="optimizer step", ylabel="|ours - TRL| / TRL", title="relative difference to TRL")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png)


def plot_anywhere(results_path, png):
    """matplotlib is not in the pinned venv: fall back to a python3 that has it (Debian's)."""
    try:
        plot(results_path, png)
        return True
    except ImportError:
        pass
    # The venv's python may be a link to the same binary: what differs is its site-packages.
    for python in dict.fromkeys(p for p in ("/usr/bin/python3", shutil.which("python3")) if p):
        done = subprocess.run([python, os.path.abspath(__file__), "--plot-only", results_path, png],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode == 0:
            return True
    print(f"note: no matplotlib found; {png} not written", file=sys.stderr)
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                        help="directory of odc-train and odc-data")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench-out", "trl_sft_peer"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    parser.add_argument("--plot-only", nargs=2, metavar=("RESULTS", "PNG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plot_only:
        plot(*args.plot_only)
        return 0
    if args.steps < 1 or args.ranks < 2:
        parser.error("--steps must be >= 1 and --ranks >= 2")
    # Nothing is downloaded (the model and tokenizer are made here); tokenizers must not warn about
    # the fork of every odc-train run.
    os.environ.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    try:
        import datasets, numpy, safetensors, torch, transformers, trl  # noqa: F401,E401
    except ImportError as exc:
        print(f"SKIP: the TRL peer needs torch, transformers, trl and datasets ({exc}); "
              "scripts/setup.sh installs them", file=sys.stderr)
        return SKIPPED
    for tool in ("odc-train", "odc-data"):
        if not os.access(os.path.join(args.bin, tool), os.X_OK):
            raise SystemExit(f"{args.bin}/{tool} not found: build it (cmake --build build --target {tool})")
    os.makedirs(args.out, exist_ok=True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    # Exactly steps x G conversations: one epoch, so neither side crosses an epoch boundary.
    model_dir, chat = make_fixtures(args.out, args.steps * global_batch(), HYPER["seed"])
    trl_steps, trl_prepared, trl_final, trl_seconds = run_trl(model_dir, chat, args.out, args.steps)

    # Identical sequences: our chat reader's output (as odc-data convert writes it) against TRL's.
    prefix = os.path.join(args.out, "ours-tokenized")
    subprocess.run([os.path.join(args.bin, "odc-data"), "convert", "--format", "chat", "--in", chat, "--out", prefix,
                    "--tokenizer", os.path.join(model_dir, "tokenizer.json"), "--chat-template", "chatml"],
                   check=True, stdout=subprocess.DEVNULL)
    ours_sequences = read_bin_dataset(prefix)
    from transformers import PreTrainedTokenizerFast
    decode = PreTrainedTokenizerFast.from_pretrained(model_dir).decode
    failures = check_same_sequences(trl_prepared, ours_sequences, decode)
    same_sequences = not failures
    expected_targets = step_targets(trl_prepared, args.steps)

    config = os.path.join(args.out, "odc.yaml")
    write_config(config, model_dir, chat, args.steps)
    runs = {"1 rank": (1, None), f"{args.ranks} ranks odc": (args.ranks, "odc"),
            f"{args.ranks} ranks collective": (args.ranks, "collective")}
    ours, exports, seconds = {}, {}, {}
    for name, (ranks, comm) in runs.items():
        overrides = [f"train.comm={comm}"] if comm else []  # one rank: the local comm
        ours[name], exports[name], seconds[name] = run_ours(args.bin, config, args.out, name.replace(" ", "-"),
                                                            ranks, args.mpirun, overrides)
    control, _, _ = run_ours(args.bin, config, args.out, "control-sequence-mean", 1, args.mpirun,
                             ["train.loss_reduction=sequence"])

    worst = {}
    failures += compare_steps(trl_steps, ours, expected_targets, args.steps, worst)
    weights = {name: compare_weights(model_dir, trl_final, export) for name, export in exports.items()}
    worst["update_rel"] = max(row["update_rel"] for rows in weights.values() for row in rows.values())
    worst["weight_max_abs"] = max(row["max_abs"] for rows in weights.values() for row in rows.values())
    failures += [f"{name}: {tensor}: update differs from TRL's by {row['update_rel']:.2e} relative "
                 f"(> {UPDATE_RTOL:g})" for name, rows in weights.items() for tensor, row in rows.items()
                 if not row["update_rel"] <= UPDATE_RTOL]
    control_diff = max(relative(c["loss"], t["loss"]) for c, t in zip(control, trl_steps))
    if control_diff <= 100 * LOSS_RTOL:
        failures.append(f"control run (train.loss_reduction=sequence) differs from TRL by only {control_diff:.1e}: "
                        "the comparison would not see a change of loss normalisation")

    markdown = table(trl_steps, list(ours.values()), list(ours))
    print(markdown)
    print(f"\nworst relative differences to TRL over {args.steps} steps and {len(ours)} runs: loss "
          f"{worst['loss_rel']:.1e} (tolerance {LOSS_RTOL:g}), grad norm {worst['grad_norm_rel']:.1e} "
          f"({GRAD_NORM_RTOL:g}), lr {worst['lr_rel']:.1e} ({LR_RTOL:g}); final weights: update error "
          f"{worst['update_rel']:.1e} ({UPDATE_RTOL:g}), max |W_ours - W_TRL| {worst['weight_max_abs']:.1e}; "
          f"control (loss_reduction=sequence) {control_diff:.1e}")
    print(f"sequences: {len(ours_sequences)}, {'identical' if same_sequences else 'DIFFERENT'} (ids and masks), "
          f"{sum(expected_targets)} loss tokens; "
          f"time: TRL {trl_seconds:.1f} s, ours " + ", ".join(f"{n} {t:.1f} s" for n, t in seconds.items()))
    results = {"steps": args.steps, "hyper": HYPER, "model": MODEL, "trl": trl_steps, "ours": ours,
               "control_sequence_mean": control, "weights": weights, "worst": worst, "failures": failures,
               "tolerance": {"loss_rel": LOSS_RTOL, "grad_norm_rel": GRAD_NORM_RTOL, "lr_rel": LR_RTOL,
                             "update_rel": UPDATE_RTOL}}
    results_path = os.path.join(args.out, "results.json")
    with open(results_path, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(markdown + "\n")
    if plot_anywhere(results_path, os.path.join(args.out, "loss.png")):
        print(f"wrote {args.out}/results.json, table.md, loss.png")
    for failure in failures[:20]:  # the first ones name the cause; the rest follow from it
        print(f"FAIL: {failure}", file=sys.stderr)
    if len(failures) > 20:
        print(f"FAIL: ... {len(failures) - 20} more in {results_path}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

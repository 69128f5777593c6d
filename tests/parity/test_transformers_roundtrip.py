#!/usr/bin/python3
"""Round trip through Hugging Face transformers: a model transformers makes is fine-tuned by
odc-train, exported with checkpoint.export_hf, and transformers takes the export back as its own.

    python test_transformers_roundtrip.py --dump build/bin/odc_parity_dump --workdir DIR

(--dump is the parity harness's common argument; odc-train and odc-generate are found next to
it.) Needs transformers (the Python environment of scripts/setup.sh): without it the test exits
77, which ctest reports as skipped, and says why.

Chat data and a byte-level BPE tokenizer come from tools/make_demo_chat.py (the demo's). Per job,
`AutoModelForCausalLM.from_config` makes a random model with that vocabulary and `save_pretrained`
writes it with the tokenizer files beside it; odc-train fine-tunes it on the chat data for a few
steps (data.format chat: the tokenizer travels with model.checkpoint) and exports it with
checkpoint.export_hf in checkpoint.export_dtype. Then, for the export:
  1. `AutoModelForCausalLM.from_pretrained` reports no missing, unexpected or mismatched keys,
     and transformers logs no warning while loading it (its load report of uninitialized or
     unused weights is such a warning; a doctored copy proves the capture sees it);
  2. `AutoTokenizer.from_pretrained` loads the exported tokenizer, and its ids for every prompt
     (the chat template's generation prompt, or the plain text) are odc-generate's prompt ids;
  3. transformers' greedy `generate(do_sample=False, max_new_tokens=N)` from those ids gives
     exactly odc-generate's completion ids (--json), eos included.
Jobs: Qwen2 (q/k/v biases, tied) saved in bf16 and exported in float32; Llama (untied) saved in
float32 and exported in bfloat16. Greedy equality is exact in both: transformers loads either
export in float32 (bf16 widens exactly), and our generation computes in fp32 over the same
values, so the logits agree to ~1e-6 and the argmax does too unless two logits are closer than
that. The smallest top-1/top-2 logit gap of transformers' steps is printed to show the margin.
Transformers running the bf16 export in bfloat16 would round every activation to 8 bits and may
pick other tokens; that is bf16 arithmetic, not a property of the export, so it is not compared.
"""

import argparse
import glob
import json
import logging
import os
import re
import shutil
import subprocess
import sys

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as exc:  # reported as skipped by ctest, never as a pass
    print(f"SKIPPED: the transformers round trip needs torch, safetensors and transformers ({exc}); "
          "run scripts/setup.sh for the Python environment")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_NEW_TOKENS = 16
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, initializer_range=0.05)
# name, config class, extra fields, dtype save_pretrained writes, checkpoint.export_dtype
JOBS = [
    ("qwen2_bf16_to_f32", "Qwen2Config", dict(tie_word_embeddings=True), torch.bfloat16, "float32"),
    ("llama_f32_to_bf16", "LlamaConfig", dict(tie_word_embeddings=False), torch.float32, "bfloat16"),
]
# (prompt, rendered as a chat user turn?)
PROMPTS = [("reverse: apple", True), ("sort: lemon", True), ("add: 12+7", True), ("repeat: tiger", True),
           ("reverse: mango", False), ("the river and the ocean", False)]


class Captured(logging.Handler):
    """Every record transformers logs at WARNING or above."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def load_model(directory):
    """from_pretrained in float32 with eager attention: (model, loading info problems, warnings logged)."""
    handler = Captured()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    transformers.logging.disable_default_handler()  # what it says is checked and reported here
    try:
        model, info = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager",
                                                           output_loading_info=True)
    finally:
        transformers.logging.enable_default_handler()
        logger.removeHandler(handler)
    return model.eval(), {k: v for k, v in info.items() if v}, handler.messages


def make_base(directory, class_name, fields, dtype, vocab, tokenizer_dir):
    with open(os.path.join(tokenizer_dir, "generation_config.json")) as f:
        special = json.load(f)
    config = getattr(transformers, class_name)(vocab_size=vocab, eos_token_id=special["eos_token_id"],
                                               pad_token_id=special["pad_token_id"], bos_token_id=None, **SHAPE,
                                               **fields)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(dtype).save_pretrained(directory)
    for path in glob.glob(os.path.join(tokenizer_dir, "*")):  # its generation_config.json (eos) wins
        shutil.copy(path, directory)


def run(cmd, what, failures, with_stderr=False):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        failures.append(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
        return None
    return proc.stdout + proc.stderr if with_stderr else proc.stdout


def hf_prompt_ids(tokenizer, prompt, chat):
    if not chat:
        return tokenizer(prompt)["input_ids"]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def check_export(name, export, export_dtype, tools, failures):
    """Loads, tokenizes and generates with transformers; returns (prompts equal, generations equal, min gap)."""
    with open(os.path.join(export, "config.json")) as f:
        written = json.load(f).get("torch_dtype")
    if written != export_dtype:
        failures.append(f"[{name}] export config.json says dtype {written!r}, expected {export_dtype!r}")
    stored = {t.dtype for t in load_file(os.path.join(export, "model.safetensors")).values()}
    if stored != {getattr(torch, export_dtype)}:
        failures.append(f"[{name}] export tensors are {stored}, expected {export_dtype}")
    model, problems, warnings = load_model(export)
    if problems:
        failures.append(f"[{name}] transformers loading the export: {problems}")
    for message in warnings:
        failures.append(f"[{name}] transformers warned while loading the export: {message}")
    tokenizer = AutoTokenizer.from_pretrained(export)
    same_prompts = same_outputs = 0
    min_gap = float("inf")
    for prompt, chat in PROMPTS:
        cmd = [tools["odc-generate"], "--model", export, "--prompt", prompt, "--json",
               "--max-new-tokens", str(MAX_NEW_TOKENS)] + (["--chat"] if chat else [])
        out = run(cmd, f"[{name}] odc-generate {prompt!r}", failures)
        if out is None:
            continue
        ours = json.loads(out)
        ids = hf_prompt_ids(tokenizer, prompt, chat)
        if ids != ours["prompt_ids"]:
            failures.append(f"[{name}] {prompt!r}: AutoTokenizer gives {ids}, odc-generate {ours['prompt_ids']}")
        else:
            same_prompts += 1
        with torch.no_grad():
            gen = model.generate(torch.tensor([ours["prompt_ids"]]), attention_mask=torch.ones(1, len(ours["prompt_ids"]),
                                 dtype=torch.long), do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                                 output_scores=True, return_dict_in_generate=True)
        theirs = gen.sequences[0, len(ours["prompt_ids"]):].tolist()
        for scores in gen.scores:
            top = torch.topk(scores[0], 2).values
            min_gap = min(min_gap, float(top[0] - top[1]))
        if theirs != ours["completion_ids"]:
            failures.append(f"[{name}] {prompt!r}: transformers generates {theirs}, odc-generate "
                            f"{ours['completion_ids']} ({ours['finish_reason']})")
        else:
            same_outputs += 1
        print(f"  {name:<18} {'chat' if chat else 'text':<4} {prompt!r:<26} {len(ours['completion_ids']):>2} tokens "
              f"({ours['finish_reason']}): {ours['completion']!r}")
    return same_prompts, same_outputs, min_gap


def check_capture_sees_problems(export, workdir, failures):
    """The warning capture is not vacuous: a copy with a tensor renamed must be reported."""
    broken = os.path.join(workdir, "broken_export")
    shutil.rmtree(broken, ignore_errors=True)
    shutil.copytree(export, broken)
    tensors = load_file(os.path.join(broken, "model.safetensors"))
    tensors["model.final_norm.weight"] = tensors.pop("model.norm.weight")
    save_file(tensors, os.path.join(broken, "model.safetensors"), metadata={"format": "pt"})
    _, problems, warnings = load_model(broken)
    if "model.norm.weight" not in problems.get("missing_keys", ()) or not any("MISSING" in m for m in warnings):
        failures.append(f"control: a checkpoint missing model.norm.weight was not reported (loading info {problems}, "
                        f"warnings {warnings})")
    else:
        print(f"  control: a copy with model.norm.weight renamed is reported (missing {sorted(problems['missing_keys'])}, "
              f"unexpected {sorted(problems.get('unexpected_keys', ()))}, {len(warnings)} warning)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="path to odc_parity_dump (its directory holds the tools)")
    parser.add_argument("--workdir", required=True, help="scratch directory")
    args = parser.parse_args()
    bin_dir = os.path.dirname(os.path.abspath(args.dump))
    tools = {t: os.path.join(bin_dir, t) for t in ("odc-train", "odc-generate")}
    for tool in tools.values():
        if not os.access(tool, os.X_OK):
            print(f"FAILED: {tool} is missing (build the odc-train and odc-generate targets)", file=sys.stderr)
            return 1
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_warning()
    transformers.logging.disable_progress_bar()

    failures, rows = [], []
    data_dir = os.path.join(args.workdir, "chat")
    made = run([sys.executable, os.path.join(HERE, "..", "..", "tools", "make_demo_chat.py"), "--out", data_dir,
                "--num", "2000", "--merges", "60", "--seed", "1"], "make_demo_chat.py", failures)
    if made is None:
        print("\n".join(failures), file=sys.stderr)
        return 1
    vocab = json.loads(made)["vocab_size"]
    tokenizer_dir = os.path.join(data_dir, "tokenizer")
    for name, class_name, fields, dtype, export_dtype in JOBS:
        job = os.path.join(args.workdir, name)
        base, export = os.path.join(job, "base"), os.path.join(job, "export")
        make_base(base, class_name, fields, dtype, vocab, tokenizer_dir)
        log = run([tools["odc-train"], "--set", "data.format=chat", "--set", f"data.train={data_dir}/chat.jsonl",
                   "--set", f"model.checkpoint={base}", "--set", "train.steps=200", "--set", "train.lr=3e-3",
                   "--set", "data.minibatch_size=8", "--set", "train.weight_decay=0.01", "--set", "train.grad_clip=1.0",
                   "--set", f"checkpoint.export_hf={export}", "--set", f"checkpoint.export_dtype={export_dtype}",
                   "--set", "train.peak_flops=1e10"], f"[{name}] odc-train", failures, with_stderr=True)
        if log is None:
            continue
        # The export must be the fine-tuned model, not the base: the run's summary shows the loss fall.
        losses = re.findall(r"done: .* loss ([0-9.]+) -> ([0-9.]+)", log)
        if not losses or not float(losses[-1][1]) < 0.5 * float(losses[-1][0]):
            failures.append(f"[{name}] odc-train did not halve the loss: {losses or log.strip()[-500:]}")
        print(f"{name}: odc-train loss {' -> '.join(losses[-1]) if losses else '?'}, exported as {export_dtype}")
        prompts, outputs, gap = check_export(name, export, export_dtype, tools, failures)
        rows.append((name, export_dtype, prompts, outputs, gap))
        if len(rows) == 1:
            check_capture_sees_problems(export, job, failures)

    print(f"\n{'job':<18} {'export':<9} {'prompt ids equal':>16} {'greedy equal':>13} {'min top-2 gap':>14}")
    for name, export_dtype, prompts, outputs, gap in rows:
        print(f"{name:<18} {export_dtype:<9} {f'{prompts}/{len(PROMPTS)}':>16} {f'{outputs}/{len(PROMPTS)}':>13} "
              f"{gap:14.2e}")
    if len(rows) != len(JOBS):
        failures.append(f"only {len(rows)} of {len(JOBS)} jobs ran")
    if failures:
        print("\nFAILED:", file=sys.stderr)
        for failure in failures:
            print("  " + failure, file=sys.stderr)
        return 1
    print("\ntransformers round trip: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

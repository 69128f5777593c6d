#!/usr/bin/env python3
"""Start-up cost: what our tools and the trainer take to start from a Hugging Face checkpoint,
against transformers loading the same files, side by side in one run.

On a Qwen2.5-0.5B-shaped model (494M parameters, vocabulary 151,936, tied head, 24 layers; random
weights in fp32, made with transformers' Qwen2Config and save_pretrained when --model is not
given), each case runs as a whole process, --repeat times per build, and one JSON line per (case,
build) gives the best wall time and the least peak resident set (ru_maxrss of the process and the
ranks it waited for) over the runs — the machine is shared, so the best run is the one least
disturbed; every run's figures are in "runs". A child's ru_maxrss starts at its parent's
high-water mark (Linux copies it at fork and keeps it across exec), so this script stays small:
torch is imported and the model made in child processes only, and "floor_mib" (this script's own
peak) is the least any case can show:

  odc-eval       the loss of one 16-token sequence (odc-eval --threads 1)
  odc-generate   a short prompt and 8 greedy tokens over the KV cache (odc-generate --threads 1)
  train-start    odc-train from model.checkpoint to its first step (train.steps=0: start-up only)
  train-step     the same run with one step (16 tokens), and its memory check ("memory: predicted
                 X, measured Y, E%": the plan against the resident set's growth)
  train-2ranks   one step on 2 ranks (odc-run --local 2, ODC over shared memory) and its memory
                 check (--skip-2ranks leaves it out)
  transformers   AutoModelForCausalLM.from_pretrained(dtype=float32) and one forward with labels on
                 the same 16 tokens, Python's start-up included (torch on 1 thread, as ours)

"before" is --before's binaries (a build without this start-up work), "after" --after's. A last
line per tool case compares "after" with transformers (time and memory ratios; the goal: within
1.5x of both). Both losses are printed: ours and transformers' on the same weights agree.

    ~/.cache/odc/python/bin/python bench/startup.py --before OLD_BUILD/bin --after build/bin

(exits 77 where torch or transformers is missing; --model DIR uses an existing checkpoint).
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "the river runs by the old mill"
TOOL_CASES = ("odc-eval", "odc-generate", "train-start")


def make_model(out):
    """The 494M Qwen2.5-0.5B shape with seeded random weights, saved as transformers saves it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(out)


def hf_peer(model, data):
    """transformers' load and forward (fp32) of the first sequence of `data`: the loss as JSON."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    ids = json.loads(open(data).readline())["input_ids"]
    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        x = torch.tensor([ids])
        loss = m(input_ids=x, labels=x).loss.item()
    print(json.dumps({"loss": loss}))


def run(cmd, log, env=None):
    """Runs `cmd` to completion: (wall seconds, peak RSS in MiB, exit status); output into `log`."""
    with open(log, "w") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024.0, proc.returncode


def memory_check(log):
    """The trainer's end-of-run memory line: (predicted MiB, measured MiB, error %) or None."""
    m = re.search(r"memory: predicted ([0-9.]+) MiB per rank, measured ([0-9.]+) MiB.*, ([-+][0-9.]+)%", open(log).read())
    return None if m is None else (float(m.group(1)), float(m.group(2)), float(m.group(3)))


def first_json(log):
    for line in open(log):
        if line.startswith("{"):
            return json.loads(line)
    return None


def commands(bin_dir, args, work):
    model, data, train = args.model, os.path.join(work, "seq16.jsonl"), os.path.join(work, "train16.jsonl")
    trainer = [os.path.join(bin_dir, "odc-train"), "--set", f"data.train={train}", "--set",
               f"model.checkpoint={model}", "--set", "data.minibatch_size=1", "--set", "train.warmup_steps=0",
               "--set", "train.threads=1"]
    return {
        "odc-eval": [os.path.join(bin_dir, "odc-eval"), "--model", model, "--data", data, "--threads", "1"],
        "odc-generate": [os.path.join(bin_dir, "odc-generate"), "--model", model, "--tokenizer",
                         os.path.join(work, "chat", "tokenizer", "tokenizer.json"), "--prompt", PROMPT,
                         "--max-new-tokens", "8", "--json", "--threads", "1"],
        "train-start": trainer + ["--set", "train.steps=0"],
        "train-step": trainer + ["--set", "train.steps=1"],
        "train-2ranks": [os.path.join(bin_dir, "odc-run"), "--local", "2"] + trainer + ["--set", "train.steps=1"],
    }


def measure(case, build, cmd, repeat, work, env=None):
    runs = []
    for i in range(repeat):
        log = os.path.join(work, f"{case}-{build}-{i}.log")
        wall, rss, rc = run(cmd, log, env)
        if rc != 0:
            sys.exit(f"{case} ({build}) exited {rc}: see {log}\n" + open(log).read()[-2000:])
        runs.append({"wall_s": round(wall, 3), "peak_rss_mib": round(rss, 1)})
    out = {"bench": "startup", "case": case, "build": build, "wall_s": min(r["wall_s"] for r in runs),
           "peak_rss_mib": min(r["peak_rss_mib"] for r in runs), "repeats": repeat, "runs": runs,
           "floor_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)}
    result = first_json(log)
    if result is not None and "loss" in result:
        out["loss"] = result["loss"]
    if result is not None and "completion_ids" in result:
        out["completion_ids"] = result["completion_ids"]
    check = memory_check(log)
    if check is not None and case != "train-start":  # no step: the plan's peak is not reached
        out["memory_plan"] = {"predicted_mib": check[0], "measured_mib": check[1], "error_pct": check[2]}
    print(json.dumps(out), flush=True)
    return out


def prepare(args, work):
    import random

    if args.model is None:
        args.model = os.path.join(work, "qwen2-494m")
        if not os.path.exists(os.path.join(args.model, "model.safetensors")):
            # In a child: this process must stay small (see "floor_mib").
            subprocess.run([sys.executable, os.path.abspath(__file__), "--make-model", args.model], check=True)
    rng = random.Random(1)
    with open(os.path.join(work, "seq16.jsonl"), "w") as f:
        f.write(json.dumps({"input_ids": [rng.randrange(151936) for _ in range(16)]}) + "\n")
    with open(os.path.join(work, "train16.jsonl"), "w") as f:
        for _ in range(2):
            f.write(json.dumps({"input_ids": [rng.randrange(151936) for _ in range(16)]}) + "\n")
    # A small byte-level BPE tokenizer (its ids are within the model's vocabulary) for odc-generate.
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_demo_chat.py"), "--out",
                    os.path.join(work, "chat"), "--num", "20", "--merges", "40", "--seed", "1"],
                   check=True, stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="binaries without the start-up work (needed when --builds names before)")
    parser.add_argument("--after", default=os.path.join(REPO, "build", "bin"), help="binaries to measure")
    parser.add_argument("--model", help="an existing checkpoint of the shape (default: made under --work)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "odc-startup-bench"))
    parser.add_argument("--repeat", type=int, default=3, help="runs per case and build (the best is reported)")
    parser.add_argument("--builds", default="before,after", help="which builds to run (comma-separated)")
    parser.add_argument("--skip-2ranks", action="store_true", help="leave out the 2-rank memory check")
    parser.add_argument("--hf-peer", nargs=2, metavar=("MODEL", "DATA"), help=argparse.SUPPRESS)
    parser.add_argument("--make-model", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_peer:
        hf_peer(*args.hf_peer)
        return 0
    if args.make_model:
        make_model(args.make_model)
        return 0
    if "before" in args.builds.split(",") and not args.before:
        parser.error("--builds names 'before': --before BIN_DIR gives its binaries (or --builds after)")
    probe = subprocess.run([sys.executable, "-c", "import torch, transformers"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(json.dumps({"bench": "startup", "skipped": f"torch/transformers missing: {probe.stderr.strip()[-300:]}"}))
        return 77
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    prepare(args, work)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    peer = measure("transformers", "peer", [sys.executable, os.path.abspath(__file__), "--hf-peer", args.model,
                                            os.path.join(work, "seq16.jsonl")], args.repeat, work, env)
    results = {}
    for build in args.builds.split(","):
        bin_dir = args.before if build == "before" else args.after
        cmds = commands(bin_dir, args, work)
        for case in ("odc-eval", "odc-generate", "train-start", "train-step"):
            results[(case, build)] = measure(case, build, cmds[case], args.repeat, work, env)
        if not args.skip_2ranks:
            measure("train-2ranks", build, cmds["train-2ranks"], args.repeat, work, env)
    for case in TOOL_CASES:
        after = results.get((case, "after"))
        if after is None:
            continue
        time_ratio = after["wall_s"] / peer["wall_s"]
        memory_ratio = after["peak_rss_mib"] / peer["peak_rss_mib"]
        line = {"bench": "startup", "summary": case, "vs": "transformers", "time_ratio": round(time_ratio, 3),
                "memory_ratio": round(memory_ratio, 3), "within_1_5x": time_ratio <= 1.5 and memory_ratio <= 1.5}
        before = results.get((case, "before"))
        if before is not None:
            line["speedup_over_before"] = round(before["wall_s"] / after["wall_s"], 2)
            line["memory_before_over_after"] = round(before["peak_rss_mib"] / after["peak_rss_mib"], 2)
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

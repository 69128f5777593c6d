#!/usr/bin/python3
"""Where a training step's time goes on the CPU: GEMMs (oneDNN) against everything else.

Runs odc-train twice on the same config under `perf record` (one rank, no MPI), with S and 3S
steps, and subtracts the first profile's samples from the second's per symbol, so start-up
(loading, tokenizing, peak measurements, JIT) cancels and what is left is 2S steps of training.
Samples in oneDNN (its JIT-generated kernels and libdnnl) count as GEMM; the rest is the non-GEMM
share (attention softmax, norms, RoPE, SwiGLU, cross-entropy, AdamW, copies, the comm layer).
Prints one JSON line:

  {"bench": "step_profile", "gemm_share": .., "non_gemm_share": .., "top": [[symbol, share], ..], ..}

Without perf it falls back to valgrind's callgrind instruction counts (much slower; instructions,
not time). Defaults: the demo's shape (configs/demo-chat.yaml on generated chat data).

    /usr/bin/python3 bench/step_profile.py --build build --steps 20 [--set key=value ...]
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def demo_data(build, work):
    summary = json.loads(subprocess.check_output(
        ["/usr/bin/python3", str(ROOT / "tools/make_demo_chat.py"), "--out", str(work), "--num", "2000", "--seed", "1"]))
    subprocess.check_call([str(build / "bin/odc-ckpt"), "init", "--out", str(work / "base"), "--set",
                           f"model.config.vocab_size={summary['vocab_size']}", "--dtype", "bf16", "--tokenizer",
                           str(work / "tokenizer"), "--seed", "0"], stdout=subprocess.DEVNULL)
    return ["model.checkpoint=" + str(work / "base"), "data.train=" + str(work / "chat.jsonl")]


def is_gemm(dso, symbol):
    return dso.startswith("[JIT]") or "libdnnl" in dso or symbol.startswith("dnnl") or "jit_avx" in symbol


def perf_profile(cmd, work, tag):
    data = work / f"{tag}.perf"
    subprocess.check_call(["perf", "record", "-q", "-o", str(data), "--"] + cmd,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = subprocess.check_output(["perf", "report", "-i", str(data), "--no-children", "--sort", "dso,symbol",
                                      "-F", "sample,dso,symbol", "--stdio"], stderr=subprocess.DEVNULL, text=True)
    counts = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*(\d+)\s+(\S+(?: tid \d+)?)\s+\[[.k]\]\s+(.*?)\s*$", line)
        if not m:
            continue
        dso, symbol = m.group(2), m.group(3)
        name = re.sub(r"\(.*", "", symbol.replace("(anonymous namespace)::", "")).strip()[:90]
        key = ("gemm", "oneDNN kernels") if is_gemm(dso, symbol) else ("other", name)
        counts[key] += int(m.group(1))
    return counts


def callgrind_profile(cmd, work, tag):
    out = work / f"{tag}.callgrind"
    subprocess.check_call(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = subprocess.check_output(["callgrind_annotate", "--inclusive=no", str(out)], text=True)
    counts = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(.*?\)\s+(\S+):(.*?)\s*(\[.*\])?$", line)
        if not m:
            continue
        n, path, symbol = int(m.group(1).replace(",", "")), m.group(2), m.group(3)
        key = ("gemm", "oneDNN kernels") if is_gemm(path, symbol) or "???" in path else ("other", symbol[:90])
        counts[key] += n
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--config", default=str(ROOT / "configs/demo-chat.yaml"))
    parser.add_argument("--steps", type=int, default=20, help="S: the profiles run S and 3S steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="config overrides (default: the demo's data)")
    args = parser.parse_args()
    build = Path(args.build).resolve()
    tool = "perf" if shutil.which("perf") else "callgrind" if shutil.which("valgrind") else None
    if tool is None:
        sys.exit("step_profile: needs perf (linux-perf) or valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        overrides = args.set or demo_data(build, work)
        base = [str(build / "bin/odc-train"), args.config, "--set", f"train.threads={args.threads}",
                "--set", "train.log_level=warn", "--set", "data.minibatch_size=16"]
        for o in overrides:
            base += ["--set", o]
        profile = perf_profile if tool == "perf" else callgrind_profile
        short = profile(base + ["--set", f"train.steps={args.steps}"], work, "short")
        long = profile(base + ["--set", f"train.steps={3 * args.steps}"], work, "long")
    diff = collections.Counter({k: long[k] - short.get(k, 0) for k in long})
    diff = collections.Counter({k: v for k, v in diff.items() if v > 0})
    total = sum(diff.values())
    if total <= 0:
        sys.exit("step_profile: no samples left after subtracting start-up")
    gemm = sum(v for (kind, _), v in diff.items() if kind == "gemm")
    top = [[name, round(v / total, 4)] for (kind, name), v in diff.most_common(12) if kind == "other"]
    print(json.dumps({"bench": "step_profile", "tool": tool, "steps": 2 * args.steps, "threads": args.threads,
                      "gemm_share": round(gemm / total, 4), "non_gemm_share": round(1 - gemm / total, 4),
                      "top_non_gemm": top, "config": args.config, "overrides": args.set}))


if __name__ == "__main__":
    main()

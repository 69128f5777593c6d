#!/usr/bin/python3
"""Model throughput: our C++ model against PyTorch on the same model and packed microbatch.

Runs the model_throughput binary (forward+backward of LlamaModel::train_microbatch, fp32) and the
same LLaMA in PyTorch float32 (tests/parity/llama_ref.py: attention computed per sequence with a
causal mask, autograd backward) with the same thread count, and prints one JSON line:

  {"bench": "model_throughput", "ours_tokens_per_s", "torch_tokens_per_s", "ratio", "sgemm_fraction",
   "core_fraction", "gemm_library", "gemm_isa", "cpu_isa", ...}

ratio = ours / torch (> 1: we are faster); sgemm_fraction = our model FLOP rate / the rate of one
SGEMM of the MLP's shape through our GEMM (gemm_peak_gflops, = sgemm_gflops); core_fraction = our
model FLOP rate / the cores' FMA-loop peak (core_peak_gflops: one core's peak x threads). The GEMM
path (gemm_library, gemm_isa, gemm_kernel) and the CPU's best ISA (cpu_isa) say whether the GEMMs
use what the CPU has (see bench/model_throughput.cpp for the FLOP formula).

    /usr/bin/python3 bench/model_throughput.py --binary build/bin/model_throughput --threads 1
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "parity"))
import llama_ref  # noqa: E402


def torch_tokens_per_s(args, seqs):
    torch.set_num_threads(args.threads)
    cfg = llama_ref.Config(
        {
            "vocab_size": args.vocab,
            "hidden_size": args.hidden,
            "intermediate_size": args.intermediate,
            "num_hidden_layers": args.layers,
            "num_attention_heads": args.heads,
            "num_key_value_heads": args.kv_heads,
            "head_dim": args.head_dim or None,
        }
    )
    params = llama_ref.random_params(cfg, dtype=torch.float32, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    sequences = [(torch.randint(0, args.vocab, (n,), generator=gen).tolist(), [1] * n) for n in seqs]
    batch = llama_ref.pack(sequences, 1.0 / (sum(seqs) - len(seqs)))

    def step():
        for p in params.values():
            p.grad = None
        llama_ref.weighted_loss(llama_ref.forward(cfg, params, batch), batch).backward()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.iters):
        step()
    seconds = (time.perf_counter() - start) / args.iters
    return sum(seqs) / seconds


def main():
    parser = argparse.ArgumentParser(description="model throughput: ours vs PyTorch (fp32, CPU)")
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "build", "bin", "model_throughput"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=0)
    parser.add_argument("--intermediate", type=int, default=688)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--seqs", default="256,512,1024", help="comma-separated sequence lengths packed into one microbatch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    seqs = [int(s) for s in args.seqs.split(",") if s]

    command = [args.binary]
    for flag in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "threads", "iters", "warmup", "seed"):
        command += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    command += ["--seqs", args.seqs]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"model_throughput failed (exit {proc.returncode}): {proc.stderr.strip()}")
    ours = json.loads(proc.stdout.strip().splitlines()[-1])

    theirs = torch_tokens_per_s(args, seqs)
    result = {
        "bench": "model_throughput",
        "ours_tokens_per_s": ours["tokens_per_s"],
        "torch_tokens_per_s": theirs,
        "ratio": ours["tokens_per_s"] / theirs,
        "sgemm_fraction": ours["sgemm_fraction"],
        "ours_gflops": ours["gflops_model"],
        "sgemm_gflops": ours["sgemm_gflops"],
        "gemm_peak_gflops": ours["gemm_peak_gflops"],
        "core_peak_gflops": ours["core_peak_gflops"],
        "core_fraction": ours["core_fraction"],
        "gemm_library": ours["gemm_library"],
        "gemm_isa": ours["gemm_isa"],
        "gemm_kernel": ours["gemm_kernel"],
        "cpu": ours["cpu"],
        "cpu_isa": ours["cpu_isa"],
        "torch_version": torch.__version__,
    }
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "seqs", "tokens", "threads", "iters"):
        result[key] = ours[key]
    print(json.dumps(result))


if __name__ == "__main__":
    main()

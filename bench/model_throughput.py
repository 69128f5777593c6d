#!/usr/bin/env python3
"""Model throughput: our C++ model against PyTorch 2 at its best on this CPU, same shape and FLOPs.

Runs the model_throughput binary (forward+backward of LlamaModel::train_microbatch, fp32) and the
same LLaMA as Hugging Face transformers' LlamaForCausalLM in PyTorch float32 (SDPA attention,
autograd backward) with the same thread count, and prints one JSON line:

  {"bench": "model_throughput", "ours_tokens_per_s", "torch_tokens_per_s", "torch_mode", "ratio",
   "torch_eager_tokens_per_s", "torch_compile_tokens_per_s", "sgemm_fraction", "core_fraction",
   "gemm_library", "gemm_isa", "cpu_isa", "torch_version", "transformers_version", ...}

The peer runs each packed sequence as its own batch-1 call (transformers' SDPA path cannot keep
packed sequences apart on the CPU), so it does exactly our FLOPs: causal attention within each
sequence, the LM head on every token, the loss as the token-weighted mean. It is timed in eager
mode and, with --compile (default on), under torch.compile (inductor; the first calls compile and
are not timed); torch_tokens_per_s is the better of the two, and ratio = ours / that (> 1: we are
faster). torch_compile_error says why compile was not measured where it failed.
sgemm_fraction = our model FLOP rate / the rate of one SGEMM of the MLP's shape through our GEMM
(gemm_peak_gflops, = sgemm_gflops); core_fraction = our model FLOP rate / the cores' FMA-loop peak
(core_peak_gflops: one core's peak x threads). The GEMM path (gemm_library, gemm_isa, gemm_kernel)
and the CPU's best ISA (cpu_isa) say whether the GEMMs use what the CPU has (see
bench/model_throughput.cpp for the FLOP formula).

    ~/.cache/odc/python/bin/python bench/model_throughput.py --binary build/bin/model_throughput --threads 1

(the Python environment of scripts/setup.sh; exits 77 where torch 2 or transformers is missing).
"""

import argparse
import json
import os
import subprocess
import sys
import time

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:
    print(f"SKIP: torch 2 and transformers are needed (scripts/setup.sh's environment): {exc}", file=sys.stderr)
    sys.exit(77)
if int(torch.__version__.split(".")[0]) < 2:
    print(f"SKIP: torch {torch.__version__} is not PyTorch 2 (use scripts/setup.sh's environment)", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def make_peer(args):
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim or args.hidden // args.heads, max_position_embeddings=8192,
        tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(args.seed)
    return LlamaForCausalLM(config).float().train()


def peer_tokens_per_s(args, seqs, compiled):
    """Tokens/s of forward+backward over the sequences, one batch-1 call each."""
    torch.set_num_threads(args.threads)
    model = make_peer(args)
    gen = torch.Generator().manual_seed(args.seed)
    inputs = [torch.randint(0, args.vocab, (1, n), generator=gen) for n in seqs]
    targets = sum(n - 1 for n in seqs)
    forward = torch.compile(model) if compiled else model

    def step():
        model.zero_grad(set_to_none=True)
        for ids in inputs:
            logits = forward(input_ids=ids).logits[0, :-1]
            # Token-weighted mean over the whole microbatch, as ours: sum of per-token losses / targets.
            loss = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum") / targets
            loss.backward()

    for _ in range(args.warmup + (1 if compiled else 0)):
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
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the peer under torch.compile (default on)")
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

    eager = peer_tokens_per_s(args, seqs, compiled=False)
    compiled, compile_error = None, None
    if args.compile:
        try:
            compiled = peer_tokens_per_s(args, seqs, compiled=True)
        except Exception as exc:  # no C++ compiler for inductor, an unsupported op, ...
            compile_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    theirs, mode = (compiled, "compile") if compiled and compiled > eager else (eager, "eager")
    result = {
        "bench": "model_throughput",
        "ours_tokens_per_s": ours["tokens_per_s"],
        "torch_tokens_per_s": theirs,
        "torch_mode": mode,
        "torch_eager_tokens_per_s": eager,
        "torch_compile_tokens_per_s": compiled,
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
        "transformers_version": transformers.__version__,
        "torch_peer": "transformers LlamaForCausalLM, fp32, SDPA attention, one call per sequence",
    }
    if compile_error:
        result["torch_compile_error"] = compile_error
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "seqs", "tokens", "threads", "iters"):
        result[key] = ours[key]
    print(json.dumps(result))


if __name__ == "__main__":
    main()

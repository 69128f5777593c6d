#!/usr/bin/env python3
"""PyTorch eager on the shapes of bench/gpu_model_throughput.cpp: the peer of our GPU throughput.

A LLaMA-style decoder written in plain torch (RMSNorm, rotary embeddings, grouped-query causal
attention through scaled_dot_product_attention, SwiGLU; tied or untied head, optional q/k/v
biases), fp32 parameters under torch.autocast(bfloat16) — fp32 masters and fp32 gradients with
bf16 compute, as ours — and fused AdamW.

Shapes (--shape): llama-1b (LLaMA-3.2-1B, tied; the default) and qwen2-1.5b
(DeepSeek-R1-Distill-Qwen-1.5B: 28 layers, hidden 1536, ffn 8960, 12/2 heads of 128, vocab
151936, untied, q/k/v biases); --layers and the other shape flags override the preset.

Cases: without --tokens one dense (SEQS, SEQ_LEN) batch (the same causal work as our packed one),
full logits; with --tokens one case per count, each a batch of ONE sequence of that many tokens
(the long-context case), with the loss computed over row chunks of --head-chunk rows, each chunk's
logits recomputed in backward (torch.utils.checkpoint; full logits of 64K x 151936 would take
~40 GB in fp32). --recompute full wraps every decoder layer in torch.utils.checkpoint
(non-reentrant): only layer inputs are kept, as our train.recompute: full. --sdpa picks
scaled_dot_product_attention's backend for the whole step (forward, recomputed forward and
backward): auto (torch's choice), flash, cudnn, efficient, math.

Each step is forward, loss, backward, optimizer step; both the whole step and its forward+backward
part are timed (the median over the steps after the first WARMUP); the allocator's peak
(torch.cuda.max_memory_allocated, reset before each case) is reported.

FLOPs are counted exactly as gpu_model_throughput counts them (LlamaConfig::training_flops): 6 x
(the matmul parameters of the layers + the LM head) per token + 12 x q_dim x layers per causal
(query, key <= query) pair (forward 4 x q_dim for QK^T and PV, backward twice that); recomputation
is not counted. MFU is against --peak-tflops (default 989.5, the H200's dense bf16 peak).

  python3 bench/gpu_model_torch.py [--shape llama-1b|qwen2-1.5b] [--layers N] [--hidden N]
      [--intermediate N] [--heads N] [--kv-heads N] [--vocab N] [--seqs 8] [--seq-len 1024]
      [--tokens N,N,...] [--recompute none|full] [--sdpa auto|flash|cudnn|efficient|math]
      [--head-chunk N] [--steps 10] [--warmup 3] [--peak-tflops 989.5] [--device cuda|cpu]

One JSON line per case: {"bench":"gpu_model_throughput","impl":"torch_eager","shape":...,"tokens":...,
"tokens_per_s":...,"step_ms":...,"fwdbwd_tokens_per_s":...,"fwdbwd_ms":...,"flops_per_token":...,
"tflops":...,"mfu":...,"peak_bytes":...,"recompute":...,"sdpa":...} (a failed case: "error").
Exits 77 without torch or a CUDA device, 1 when a case failed.
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    import torch.utils.checkpoint
except Exception as exc:
    print(f"SKIP: torch unavailable ({exc})", file=sys.stderr)
    sys.exit(77)


SHAPES = {
    "llama-1b": {"layers": 16, "hidden": 2048, "intermediate": 8192, "heads": 32, "kv_heads": 8, "vocab": 128256,
                 "tied": True, "qkv_bias": False, "rope_theta": 500000.0},
    "qwen2-1.5b": {"layers": 28, "hidden": 1536, "intermediate": 8960, "heads": 12, "kv_heads": 2, "vocab": 151936,
                   "tied": False, "qkv_bias": True, "rope_theta": 10000.0},
}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama-1b")
    for name in ("layers", "hidden", "intermediate", "heads", "kv-heads", "vocab"):
        p.add_argument("--" + name, type=int, default=None, help="overrides the shape's")
    for name, default in (("seqs", 8), ("seq-len", 1024), ("steps", 10), ("warmup", 3), ("head-chunk", -1)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--tokens", default="", help="comma-separated token counts: one single-sequence case each")
    p.add_argument("--recompute", choices=("none", "full"), default="none")
    p.add_argument("--sdpa", choices=("auto", "flash", "cudnn", "efficient", "math"), default="auto")
    p.add_argument("--peak-tflops", type=float, default=989.5)
    p.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a check of this script)")
    a = p.parse_args()
    for key, value in SHAPES[a.shape].items():
        if getattr(a, key, None) is None:
            setattr(a, key, value)
    try:
        a.tokens = sorted(int(t) for t in a.tokens.split(",") if t.strip())
    except ValueError:
        p.error(f"--tokens {a.tokens!r}: expected comma-separated integers")
    if a.head_chunk < 0:
        a.head_chunk = 4096 if a.tokens else 0  # whole logits for the 1B case, as before
    if a.hidden % a.heads or a.heads % a.kv_heads or a.steps <= a.warmup or any(t < 2 for t in a.tokens):
        p.error("hidden must divide by heads, heads by kv-heads, steps must exceed warmup, tokens be at least 2")
    return a


def rms_norm(x, weight, eps=1e-5):
    if hasattr(F, "rms_norm"):  # torch >= 2.4
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def attention(q, k, v, heads, kv, expand_kv):
    if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0: the math, for --device cpu checks
        rep = heads // kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        causal = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        return torch.softmax(s.float().masked_fill(causal, float("-inf")), -1).to(v.dtype) @ v
    if heads == kv:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if not expand_kv:
        try:  # torch >= 2.5 takes the grouped heads natively
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except TypeError:
            pass
    rep = heads // kv
    return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                          is_causal=True)


class Layer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, hd = a.hidden, a.hidden // a.heads
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, hd
        # cuDNN's and the memory-efficient SDPA take no grouped heads: k and v are expanded for them.
        self.expand_kv = a.sdpa in ("cudnn", "efficient")
        self.n1 = torch.nn.Parameter(torch.ones(d))
        self.n2 = torch.nn.Parameter(torch.ones(d))
        self.q = torch.nn.Linear(d, a.heads * hd, bias=a.qkv_bias)
        self.k = torch.nn.Linear(d, a.kv_heads * hd, bias=a.qkv_bias)
        self.v = torch.nn.Linear(d, a.kv_heads * hd, bias=a.qkv_bias)
        self.o = torch.nn.Linear(a.heads * hd, d, bias=False)
        self.gate = torch.nn.Linear(d, a.intermediate, bias=False)
        self.up = torch.nn.Linear(d, a.intermediate, bias=False)
        self.down = torch.nn.Linear(a.intermediate, d, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = rms_norm(x, self.n1)
        q = self.q(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        attn = attention(q, k, v, self.heads, self.kv, self.expand_kv)
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        h = rms_norm(x, self.n2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def chunk_loss(h, weight, targets):
    return F.cross_entropy((h @ weight.t()).float(), targets, reduction="sum")


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.hidden))
        self.head = None if a.tied else torch.nn.Parameter(torch.empty(a.vocab, a.hidden))
        self.recompute = a.recompute == "full"
        self.head_chunk = a.head_chunk

    def forward(self, ids, cos, sin, targets):
        """The mean next-token loss of the batch."""
        x = self.embed(ids)
        for layer in self.layers:
            if self.recompute:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        x = rms_norm(x, self.norm)
        weight = self.embed.weight if self.head is None else self.head
        h, t = x.reshape(-1, x.shape[-1]), targets.reshape(-1)
        if not self.head_chunk:
            return F.cross_entropy((h @ weight.t()).float(), t)
        total = sum(torch.utils.checkpoint.checkpoint(chunk_loss, h[i:i + self.head_chunk], weight,
                                                      t[i:i + self.head_chunk], use_reentrant=False)
                    for i in range(0, h.shape[0], self.head_chunk))
        return total / h.shape[0]


def sdpa_context(a):
    """The SDPA backend for the whole step, or nothing (auto)."""
    import contextlib
    if a.sdpa == "auto" or a.device != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[a.sdpa]
    return sdpa_kernel([backend])


def run_case(a, model, opt, dev, seqs, seq_len):
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    hd = a.hidden // a.heads
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    ang = torch.arange(seq_len, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    ids = torch.randint(0, a.vocab, (seqs, seq_len), device=dev)
    targets = torch.roll(ids, -1, dims=1)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with sdpa_context(a):
            with torch.autocast(a.device, dtype=torch.bfloat16):
                loss = model(ids, cos, sin, targets)
            loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= a.warmup:
            times.append((t1 - t0, time.perf_counter() - t0))
    tokens = seqs * seq_len
    q_dim, kv_dim = a.heads * hd, a.kv_heads * hd
    layer_params = a.layers * (2 * a.hidden * q_dim + 2 * a.hidden * kv_dim + 3 * a.hidden * a.intermediate)
    pairs = seqs * seq_len * (seq_len + 1) / 2
    flops = 6 * (layer_params + a.vocab * a.hidden) * tokens + 12 * q_dim * a.layers * pairs
    fwdbwd_s = sorted(t[0] for t in times)[len(times) // 2]
    step_s = sorted(t[1] for t in times)[len(times) // 2]
    tflops = flops / step_s / 1e12
    return {"bench": "gpu_model_throughput", "impl": "torch_eager", "model": a.shape,
            "shape": f"L{a.layers} d{a.hidden} ff{a.intermediate} h{a.heads}/{a.kv_heads}x{hd} v{a.vocab} "
                     f"{'tied' if a.tied else 'untied'}{' qkv-bias' if a.qkv_bias else ''} {seqs}x{seq_len}",
            "tokens": tokens, "seqs": seqs, "recompute": a.recompute, "sdpa": a.sdpa, "head_chunk": a.head_chunk,
            "tokens_per_s": tokens / step_s, "step_ms": 1e3 * step_s,
            "fwdbwd_tokens_per_s": tokens / fwdbwd_s, "fwdbwd_ms": 1e3 * fwdbwd_s,
            "flops_per_token": flops / tokens, "tflops": tflops, "mfu": tflops / a.peak_tflops,
            "peak_bytes": torch.cuda.max_memory_allocated() if cuda else None,
            "loss": float(loss.detach()), "torch": torch.__version__}


def main():
    a = parse()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device", file=sys.stderr)
        return 77
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = Model(a).to(dev)
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if a.device == "cuda" else {}))
    cases = [(1, t) for t in a.tokens] if a.tokens else [(a.seqs, a.seq_len)]
    for seqs, seq_len in cases:
        try:
            row = run_case(a, model, opt, dev, seqs, seq_len)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # OOM, or no SDPA kernel for the shape
            print(json.dumps({"bench": "gpu_model_throughput", "impl": "torch_eager", "model": a.shape,
                              "tokens": seqs * seq_len, "recompute": a.recompute, "sdpa": a.sdpa,
                              "error": str(exc).splitlines()[0][:300]}), flush=True)
            return 1
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

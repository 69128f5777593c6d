#!/usr/bin/env python3
"""PyTorch eager on the shape of bench/gpu_model_throughput.cpp: the peer of our GPU throughput.

A LLaMA-style decoder written in plain torch (RMSNorm, rotary embeddings, grouped-query causal
attention through scaled_dot_product_attention, SwiGLU, tied embeddings), fp32 parameters under
torch.autocast(bfloat16) — fp32 masters with bf16 compute, as ours — and fused AdamW. Each step is
one packed microbatch of SEQS sequences of SEQ_LEN tokens (a dense (SEQS, SEQ_LEN) batch: the
same causal work as our packed one), forward, loss, backward, optimizer step; both the whole step
and its forward+backward part are timed (the median over the steps after the first WARMUP).

FLOPs per token are counted exactly as gpu_model_throughput counts them: 6 x (the matmul
parameters of the layers + the LM head) + the causal attention's 6 x layers x hidden x
(SEQ_LEN + 1) (forward 2 x (s + 1) x hidden per token and layer for QK^T and PV over the causal
pairs, backward twice that).

  python3 bench/gpu_model_torch.py [--layers 16] [--hidden 2048] [--intermediate 8192]
      [--heads 32] [--kv-heads 8] [--vocab 128256] [--seqs 8] [--seq-len 1024] [--steps 10] [--warmup 3]

One JSON line: {"bench":"gpu_model_throughput","impl":"torch_eager","shape":...,"tokens_per_s":...,
"step_ms":...,"fwdbwd_tokens_per_s":...,"fwdbwd_ms":...,"flops_per_token":...}. Exits 77 without torch or a CUDA device.
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except Exception as exc:
    print(f"SKIP: torch unavailable ({exc})", file=sys.stderr)
    sys.exit(77)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("layers", 16), ("hidden", 2048), ("intermediate", 8192), ("heads", 32),
                          ("kv-heads", 8), ("vocab", 128256), ("seqs", 8), ("seq-len", 1024),
                          ("steps", 10), ("warmup", 3)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a check of this script)")
    a = p.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads or a.steps <= a.warmup:
        p.error("hidden must divide by heads, heads by kv-heads, and steps must exceed warmup")
    return a


def rms_norm(x, weight, eps=1e-5):
    if hasattr(F, "rms_norm"):  # torch >= 2.4
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def attention(q, k, v, heads, kv):
    if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0: the math, for --device cpu checks
        rep = heads // kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        causal = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        return torch.softmax(s.float().masked_fill(causal, float("-inf")), -1).to(v.dtype) @ v
    if heads == kv:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    try:  # torch >= 2.5 takes the grouped heads natively
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:
        rep = heads // kv
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                              is_causal=True)


class Layer(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, hd = a.hidden, a.hidden // a.heads
        self.heads, self.kv, self.hd = a.heads, a.kv_heads, hd
        self.n1 = torch.nn.Parameter(torch.ones(d))
        self.n2 = torch.nn.Parameter(torch.ones(d))
        self.q = torch.nn.Linear(d, a.heads * hd, bias=False)
        self.k = torch.nn.Linear(d, a.kv_heads * hd, bias=False)
        self.v = torch.nn.Linear(d, a.kv_heads * hd, bias=False)
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
        attn = attention(q, k, v, self.heads, self.kv)
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        h = rms_norm(x, self.n2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.hidden))

    def forward(self, ids, cos, sin):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = rms_norm(x, self.norm)
        return x @ self.embed.weight.t()  # tied LM head


def main():
    a = parse()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device", file=sys.stderr)
        return 77
    torch.manual_seed(0)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    model = Model(a).to(dev)
    for p in model.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if a.device == "cuda" else {}))
    hd = a.hidden // a.heads
    inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    ang = torch.arange(a.seq_len, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    ids = torch.randint(0, a.vocab, (a.seqs, a.seq_len), device=dev)
    targets = torch.roll(ids, -1, dims=1)
    times = []
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(a.device, dtype=torch.bfloat16):
            logits = model(ids, cos, sin)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), targets.view(-1))
        loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= a.warmup:
            times.append((t1 - t0, time.perf_counter() - t0))
    tokens = a.seqs * a.seq_len
    layer_params = a.layers * (2 * a.hidden * a.hidden + 2 * a.hidden * (a.kv_heads * hd) + 3 * a.hidden * a.intermediate)
    flops_per_token = 6 * (layer_params + a.vocab * a.hidden) + 6 * a.layers * a.hidden * (a.seq_len + 1)
    fwdbwd_s = sorted(t[0] for t in times)[len(times) // 2]
    step_s = sorted(t[1] for t in times)[len(times) // 2]
    print(json.dumps({"bench": "gpu_model_throughput", "impl": "torch_eager",
                      "shape": f"L{a.layers} d{a.hidden} ff{a.intermediate} h{a.heads}/{a.kv_heads} v{a.vocab} "
                               f"{a.seqs}x{a.seq_len}",
                      "tokens_per_s": tokens / step_s, "step_ms": 1e3 * step_s,
                      "fwdbwd_tokens_per_s": tokens / fwdbwd_s, "fwdbwd_ms": 1e3 * fwdbwd_s,
                      "flops_per_token": flops_per_token,
                      "loss": float(loss), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

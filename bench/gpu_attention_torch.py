#!/usr/bin/env python3
"""PyTorch's flash SDPA on the shapes of bench/gpu_attention.cpp, one JSON line per shape with the
same fields plus "impl" (the SDPA backend, below) and how the batch was fed to torch:

  ragged_mode  "dense_batch"    equal lengths (1x4096, 8x512): one (B, H, S, D) call
               "nested_jagged"  ragged: one call on torch.jagged nested tensors (flash varlen)
               "per_sequence"   ragged, when the nested path is unavailable: one call per sequence
  gqa_mode     "enable_gqa"     n_kv_heads < n_heads passed natively (torch >= 2.5)
               "expanded_kv"    K/V heads repeated before the timed region when the flash backend
                                rejects enable_gqa (dK/dV are then per query head, not reduced)
               "none"           n_kv_heads == n_heads

Each shape runs twice, once with only the flash backend enabled and once with only cuDNN's
(torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION / CUDNN_ATTENTION); "impl" is
"torch_sdpa_flash" or "torch_sdpa_cudnn"): a shape a backend cannot run is reported with an
"error" field instead of silently using another kernel; only flash errors fail the script.
Ragged shapes also run torch.nn.attention.varlen.varlen_attn (flash's varlen kernel on packed
[tokens, heads, dim] with cumulative offsets, the way a packed trainer feeds it; torch >= 2.10),
"impl" "torch_varlen", when this torch has it.
Timing: CUDA events, 3 warm-ups, median of ITERS (default 20). FLOPs as in gpu_attention.cpp:
forward 4 * sum s(s+1)/2 * head_dim * n_heads, backward 2.5x that.

  python3 bench/gpu_attention_torch.py [ITERS]       exits 77 without torch or a CUDA device
"""
import json
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as exc:  # torch missing or too old for torch.nn.attention
    print(f"SKIP: torch unavailable ({exc})", file=sys.stderr)
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device", file=sys.stderr)
    sys.exit(77)

RAGGED = [1024, 700, 512, 400, 300, 256, 200, 180, 150, 100, 90, 70, 50, 30, 20, 14]
SHAPES = []
for heads, kv in ((16, 16), (32, 8)):
    SHAPES.append(("1x4096", [4096], heads, kv, 128))
    SHAPES.append(("8x512", [512] * 8, heads, kv, 128))
    SHAPES.append(("ragged16", RAGGED, heads, kv, 128))


def fwd_flops(seqlens, heads, head_dim):
    return 4.0 * sum(s * (s + 1) / 2.0 for s in seqlens) * head_dim * heads


def median_ms(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def sdpa(q, k, v, gqa):
    if gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make_runner(seqlens, heads, kv, d, gqa_mode, ragged_mode):
    """Returns (forward, forward_backward) closures for one feeding strategy."""
    dev, dt = "cuda", torch.bfloat16
    tokens = sum(seqlens)
    kv_eff = heads if gqa_mode == "expanded_kv" else kv
    gqa = gqa_mode == "enable_gqa"
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=gen)

    if ragged_mode == "dense_batch":
        b, s = len(seqlens), seqlens[0]
        # (B, S, H, D) storage, as the packed [tokens, heads, dim] layout, viewed as (B, H, S, D).
        q = rand(b, s, heads, d).requires_grad_()
        k = rand(b, s, kv_eff, d).requires_grad_()
        v = rand(b, s, kv_eff, d).requires_grad_()
        dout = rand(b, s, heads, d).transpose(1, 2)
        leaves = (q, k, v)

        def fwd():
            return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), gqa)

        def fwdbwd():
            out = fwd()
            torch.autograd.grad(out, leaves, dout)

        return fwd, fwdbwd

    if ragged_mode == "nested_jagged":
        offsets = torch.tensor([0] + list(_cumsum(seqlens)), device=dev, dtype=torch.int64)
        qv = rand(tokens, heads, d).requires_grad_()
        kv_ = rand(tokens, kv_eff, d).requires_grad_()
        vv = rand(tokens, kv_eff, d).requires_grad_()
        dout = rand(tokens, heads, d)
        leaves = (qv, kv_, vv)

        def nt(values):
            return torch.nested.nested_tensor_from_jagged(values, offsets).transpose(1, 2)

        def fwd():
            return sdpa(nt(qv), nt(kv_), nt(vv), gqa)

        def fwdbwd():
            out = fwd().transpose(1, 2).values()
            torch.autograd.grad(out, leaves, dout)

        return fwd, fwdbwd

    # per_sequence: separate leaves per sequence (no gradient scatter into a packed buffer).
    qs = [rand(1, s, heads, d).requires_grad_() for s in seqlens]
    ks = [rand(1, s, kv_eff, d).requires_grad_() for s in seqlens]
    vs = [rand(1, s, kv_eff, d).requires_grad_() for s in seqlens]
    douts = [rand(1, s, heads, d).transpose(1, 2) for s in seqlens]
    leaves = qs + ks + vs

    def fwd():
        return [sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), gqa)
                for q, k, v in zip(qs, ks, vs)]

    def fwdbwd():
        outs = fwd()
        torch.autograd.grad(outs, leaves, douts)

    return fwd, fwdbwd


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


BACKENDS = (("torch_sdpa_flash", "FLASH_ATTENTION"), ("torch_sdpa_cudnn", "CUDNN_ATTENTION"))


def run_shape(name, seqlens, heads, kv, d, iters, impl="torch_sdpa_flash", backend="FLASH_ATTENTION"):
    ragged = len(set(seqlens)) > 1
    ragged_modes = ["nested_jagged", "per_sequence"] if ragged else ["dense_batch"]
    gqa_modes = ["enable_gqa", "expanded_kv"] if kv != heads else ["none"]
    errors = []
    for ragged_mode in ragged_modes:
        for gqa_mode in gqa_modes:
            try:
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    fwd, fwdbwd = make_runner(seqlens, heads, kv, d, gqa_mode, ragged_mode)
                    fwd_ms = median_ms(fwd, iters)
                    fwdbwd_ms = median_ms(fwdbwd, iters)
            except Exception as exc:  # this feeding strategy is not supported by this torch
                errors.append(f"{ragged_mode}/{gqa_mode}: {type(exc).__name__}: {str(exc)[:160]}")
                torch.cuda.synchronize()
                continue
            flops = fwd_flops(seqlens, heads, d)
            return {
                "bench": "gpu_attention", "impl": impl, "shape": name,
                "tokens": sum(seqlens), "num_seqs": len(seqlens), "max_seqlen": max(seqlens),
                "n_heads": heads, "n_kv_heads": kv, "head_dim": d,
                "fwd_ms": round(fwd_ms, 4), "fwd_tflops": round(flops / (fwd_ms * 1e-3) / 1e12, 2),
                "fwdbwd_ms": round(fwdbwd_ms, 4),
                "fwdbwd_tflops": round(3.5 * flops / (fwdbwd_ms * 1e-3) / 1e12, 2),
                "ragged_mode": ragged_mode, "gqa_mode": gqa_mode, "torch": torch.__version__,
                "fallbacks": errors,
            }
    return {"bench": "gpu_attention", "impl": impl, "shape": name,
            "tokens": sum(seqlens), "num_seqs": len(seqlens), "n_heads": heads,
            "n_kv_heads": kv, "head_dim": d, "error": errors, "torch": torch.__version__}


def varlen_row(name, seqlens, heads, kv, d, iters):
    """flash varlen on packed tensors (None when this torch has no torch.nn.attention.varlen)."""
    try:
        import inspect
        from torch.nn.attention.varlen import varlen_attn
    except Exception:
        return None
    params = inspect.signature(varlen_attn).parameters
    # The causal switch moved between releases: is_causal (2.10), window_size=(-1, 0) later.
    causal = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
    gqa = "enable_gqa" in params
    kv_eff = kv if gqa else heads
    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    tokens = sum(seqlens)
    cu = torch.tensor([0] + list(_cumsum(seqlens)), device=dev, dtype=torch.int32)
    q = torch.randn(tokens, heads, d, device=dev, dtype=dt, generator=gen).requires_grad_()
    k = torch.randn(tokens, kv_eff, d, device=dev, dtype=dt, generator=gen).requires_grad_()
    v = torch.randn(tokens, kv_eff, d, device=dev, dtype=dt, generator=gen).requires_grad_()
    dout = torch.randn(tokens, heads, d, device=dev, dtype=dt, generator=gen)
    extra = {"enable_gqa": True} if gqa and kv != heads else {}
    m = max(seqlens)

    def fwd():
        return varlen_attn(q, k, v, cu, cu, m, m, **causal, **extra)

    def fwdbwd():
        torch.autograd.grad(fwd(), (q, k, v), dout)

    row = {"bench": "gpu_attention", "impl": "torch_varlen", "shape": name, "tokens": tokens,
           "num_seqs": len(seqlens), "max_seqlen": m, "n_heads": heads, "n_kv_heads": kv, "head_dim": d,
           "ragged_mode": "packed_varlen", "gqa_mode": "enable_gqa" if extra else ("expanded_kv" if kv != heads else "none"),
           "torch": torch.__version__}
    try:
        fwd_ms = median_ms(fwd, iters)
        fwdbwd_ms = median_ms(fwdbwd, iters)
    except Exception as exc:  # reported, not fatal: flash SDPA stays the reference peer
        torch.cuda.synchronize()
        row["error"] = [f"{type(exc).__name__}: {str(exc)[:160]}"]
        return row
    flops = fwd_flops(seqlens, heads, d)
    row.update({"fwd_ms": round(fwd_ms, 4), "fwd_tflops": round(flops / (fwd_ms * 1e-3) / 1e12, 2),
                "fwdbwd_ms": round(fwdbwd_ms, 4), "fwdbwd_tflops": round(3.5 * flops / (fwdbwd_ms * 1e-3) / 1e12, 2)})
    return row


def main():
    iters = max(1, int(sys.argv[1])) if len(sys.argv) > 1 else 20
    failed = False
    for name, seqlens, heads, kv, d in SHAPES:
        for impl, backend in BACKENDS:
            if not hasattr(SDPBackend, backend):
                print(json.dumps({"bench": "gpu_attention", "impl": impl, "shape": name, "n_heads": heads,
                                  "n_kv_heads": kv, "head_dim": d, "error": [f"this torch has no {backend}"]}))
                continue
            row = run_shape(name, seqlens, heads, kv, d, iters, impl, backend)
            # flash is the reference peer; cuDNN's SDPA may refuse shapes (reported, not fatal).
            failed = failed or ("error" in row and impl == "torch_sdpa_flash")
            print(json.dumps(row), flush=True)
        if len(set(seqlens)) > 1:
            row = varlen_row(name, seqlens, heads, kv, d, iters)
            if row is not None:
                print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

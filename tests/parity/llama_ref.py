"""Independent PyTorch reference of a LLaMA-family decoder over packed sequences.

Written from the math (Hugging Face LlamaForCausalLM semantics; Qwen3ForCausalLM's per-head q/k
RMSNorm when qk_norm), not from the C++ code:

  embedding -> L x [RMSNorm -> q/k/v projections (+bias when attention_bias) -> (qk_norm: RMSNorm
  of each q and k head over head_dim, one weight per q/k shared by the heads) -> RoPE (rotate-half,
  positions restart per sequence, llama3 rope_scaling) -> causal GQA attention computed per
  sequence -> o_proj + residual -> RMSNorm -> down(silu(gate(x)) * up(x)) + residual]
  -> RMSNorm -> lm_head (embedding^T when tie_word_embeddings) -> logits

loss = sum over targets of weight * cross-entropy. Autograd supplies the gradients; AdamW and
global-norm clipping are torch.optim.AdamW and torch.nn.utils.clip_grad_norm_.

The dtype is a parameter: float64 for the parity tests, bfloat16 for the bf16 parity test.
Run with the Python of scripts/setup.sh (torch 2) or /usr/bin/python3 (Debian's torch).
"""

import json
import math
import struct

import numpy as np
import torch

_SAFETENSORS_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "U32": np.uint32,
}


class Config:
    """The Hugging Face config.json fields the model depends on."""

    def __init__(self, hf):
        self.vocab_size = int(hf["vocab_size"])
        self.hidden_size = int(hf["hidden_size"])
        self.intermediate_size = int(hf["intermediate_size"])
        self.num_hidden_layers = int(hf["num_hidden_layers"])
        self.num_attention_heads = int(hf["num_attention_heads"])
        self.num_key_value_heads = int(hf.get("num_key_value_heads") or self.num_attention_heads)
        qwen3 = hf.get("model_type") == "qwen3"
        # Qwen3Config's head_dim defaults to 128, not hidden_size / heads.
        default_head_dim = 128 if qwen3 else self.hidden_size // self.num_attention_heads
        self.head_dim = int(hf.get("head_dim") or default_head_dim)
        self.rms_norm_eps = float(hf.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(hf.get("rope_theta", 10000.0))
        self.rope_scaling = hf.get("rope_scaling")
        self.tie_word_embeddings = bool(hf.get("tie_word_embeddings", False))
        self.attention_bias = bool(hf.get("attention_bias", False))
        # Qwen3's q_norm/k_norm (the C++ LlamaConfig's qk_norm; model_type qwen3 implies it).
        self.qk_norm = bool(hf.get("qk_norm", qwen3))


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata) parsed by hand: u64 LE header length, JSON, bytes."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = blob[8 + header_len :]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        raw = data[begin:end]
        if entry["dtype"] == "BF16":
            # bf16 is the upper half of an f32.
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]]).newbyteorder("<"))
        tensors[name] = array.reshape(shape)
    return tensors, metadata


def parameter_shapes(cfg):
    """{HF name: shape} of every parameter, in checkpoint order."""
    c, q, kv, f = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim, cfg.intermediate_size
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, c)}
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        shapes[p + "input_layernorm.weight"] = (c,)
        shapes[p + "self_attn.q_proj.weight"] = (q, c)
        shapes[p + "self_attn.k_proj.weight"] = (kv, c)
        shapes[p + "self_attn.v_proj.weight"] = (kv, c)
        if cfg.attention_bias:
            shapes[p + "self_attn.q_proj.bias"] = (q,)
            shapes[p + "self_attn.k_proj.bias"] = (kv,)
            shapes[p + "self_attn.v_proj.bias"] = (kv,)
        shapes[p + "self_attn.o_proj.weight"] = (c, q)
        if cfg.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (cfg.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (cfg.head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (c,)
        shapes[p + "mlp.gate_proj.weight"] = (f, c)
        shapes[p + "mlp.up_proj.weight"] = (f, c)
        shapes[p + "mlp.down_proj.weight"] = (c, f)
    shapes["model.norm.weight"] = (c,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, c)
    return shapes


def decays(name, tensor):
    """Weight decay applies to matrices only (norm weights and biases are excluded)."""
    return tensor.dim() >= 2


def params_from_arrays(arrays, dtype=torch.float64):
    return {name: torch.tensor(np.array(a, dtype=np.float64), dtype=dtype).requires_grad_(True) for name, a in arrays.items()}


def random_params(cfg, dtype=torch.float32, seed=0, std=0.02):
    """Fresh parameters (normal matrices, unit norms, zero biases), for benchmarks."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in parameter_shapes(cfg).items():
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=dtype)
        elif name.endswith(".bias"):
            t = torch.zeros(shape, dtype=dtype)
        else:
            t = torch.randn(shape, generator=gen, dtype=dtype) * std
        params[name] = t.requires_grad_(True)
    return params


def rope_inv_freq(cfg):
    """inv_freq[i] = theta^(-2i/D), with Llama 3.1 frequency-band scaling when configured."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.rope_scaling or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq
    assert rope_type == "llama3", rope_type
    factor = float(scaling["factor"])
    low = float(scaling["low_freq_factor"])
    high = float(scaling["high_freq_factor"])
    old_context = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context / low
    high_freq_wavelen = old_context / high
    out = []
    for f in inv_freq.tolist():
        wavelen = 2.0 * math.pi / f
        if wavelen < high_freq_wavelen:  # high frequency: unchanged
            out.append(f)
        elif wavelen > low_freq_wavelen:  # low frequency: slowed down by `factor`
            out.append(f / factor)
        else:  # in between: interpolate between the two
            smooth = (old_context / wavelen - low) / (high - low)
            out.append((1.0 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def pack(sequences, weight):
    """Packs [(input_ids, loss_mask)] into one row: tokens, positions, sequence bounds, targets and
    weights. Position t predicts token t+1 of the same sequence; it carries `weight` when that
    token's loss_mask is set (the last token of a sequence predicts nothing)."""
    tokens, positions, bounds, targets, weights = [], [], [0], [], []
    for ids, mask in sequences:
        n = len(ids)
        tokens += list(ids)
        positions += list(range(n))
        for t in range(n):
            predicts = t + 1 < n and mask[t + 1] != 0
            targets.append(ids[t + 1] if t + 1 < n else 0)
            weights.append(weight if predicts else 0.0)
        bounds.append(bounds[-1] + n)
    return {
        "tokens": torch.tensor(tokens, dtype=torch.long),
        "positions": torch.tensor(positions, dtype=torch.long),
        "bounds": bounds,
        "targets": torch.tensor(targets, dtype=torch.long),
        "weights": torch.tensor(weights, dtype=torch.float64),
    }


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x: [tokens, heads, D]; cos/sin: [tokens, D]."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def causal_attention(q, k, v, bounds, n_heads, n_kv_heads):
    """q: [T, H, D]; k, v: [T, KV, D]. Softmax attention within each sequence only."""
    group = n_heads // n_kv_heads
    scale = 1.0 / math.sqrt(q.shape[-1])
    outputs = []
    for s in range(len(bounds) - 1):
        lo, hi = bounds[s], bounds[s + 1]
        qs = q[lo:hi].transpose(0, 1) * scale  # [H, n, D]; scaling q is cheaper than scaling scores
        ks = k[lo:hi].transpose(0, 1).repeat_interleave(group, dim=0)  # query head h uses kv head h // group
        vs = v[lo:hi].transpose(0, 1).repeat_interleave(group, dim=0)
        scores = torch.matmul(qs, ks.transpose(1, 2))
        n = hi - lo
        future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        outputs.append(torch.matmul(probs, vs).transpose(0, 1).reshape(n, -1))
    return torch.cat(outputs, dim=0)


def linear(x, params, name):
    y = x @ params[name + ".weight"].t()
    bias = params.get(name + ".bias")
    return y + bias if bias is not None else y


def forward(cfg, params, batch):
    """Logits [tokens, vocab] of a packed batch (see pack())."""
    dtype = params["model.embed_tokens.weight"].dtype
    H, KV, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    T = batch["tokens"].shape[0]
    angles = batch["positions"].to(torch.float64)[:, None] * rope_inv_freq(cfg)[None, :]  # [T, D/2]
    cos = torch.cat((angles.cos(), angles.cos()), dim=-1).to(dtype)
    sin = torch.cat((angles.sin(), angles.sin()), dim=-1).to(dtype)

    x = params["model.embed_tokens.weight"][batch["tokens"]]
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rms_norm(x, params[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = linear(h, params, p + "self_attn.q_proj").view(T, H, D)
        k = linear(h, params, p + "self_attn.k_proj").view(T, KV, D)
        if cfg.qk_norm:  # per head, over its D values, before RoPE
            q = rms_norm(q, params[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
            k = rms_norm(k, params[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        v = linear(h, params, p + "self_attn.v_proj").view(T, KV, D)
        attn = causal_attention(q, k, v, batch["bounds"], H, KV)
        x = x + attn @ params[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, params[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gate = h @ params[p + "mlp.gate_proj.weight"].t()
        up = h @ params[p + "mlp.up_proj.weight"].t()
        x = x + (torch.nn.functional.silu(gate) * up) @ params[p + "mlp.down_proj.weight"].t()
    x = rms_norm(x, params["model.norm.weight"], cfg.rms_norm_eps)
    head = params["model.embed_tokens.weight"] if cfg.tie_word_embeddings else params["lm_head.weight"]
    return x @ head.t()


def weighted_loss(logits, batch):
    """sum_t weight[t] * CE(logits[t], target[t]); weight-0 rows contribute nothing."""
    nll = torch.nn.functional.cross_entropy(logits, batch["targets"], reduction="none")
    return (nll * batch["weights"].to(logits.dtype)).sum()


def make_optimizer(params, lr, beta1, beta2, eps, weight_decay):
    decay = [t for n, t in params.items() if decays(n, t)]
    no_decay = [t for n, t in params.items() if not decays(n, t)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)

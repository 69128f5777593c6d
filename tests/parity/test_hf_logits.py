#!/usr/bin/python3
"""Hugging Face checkpoint parity: logits of a checkpoint loaded through io::HfCheckpoint and run by
our fp32 model (odc_hf_logits_dump) against the float64 PyTorch reference (llama_ref.py), which
parses the safetensors files and the index itself (no `safetensors` package).

    /usr/bin/python3 test_hf_logits.py --dump build/bin/odc_parity_dump --workdir DIR

(--dump is the parity harness's common argument; odc_hf_logits_dump and odc-ckpt are found next
to it.) Per case:
  1. `odc-ckpt init` writes a checkpoint; the script checks its config.json and every tensor's
     name, dtype and shape against the HF layout it derives from the config itself.
  2. The script rewrites the checkpoint with its own safetensors writer (other dtype, other
     sharding), with the constant tensors (norm weights, biases) perturbed so that a swapped norm
     or a dropped bias changes the logits.
  3. Both checkpoints go through odc_hf_logits_dump; the logits of a packed batch of three
     sequences are compared with the reference's.

Cases: LLaMA (untied, no bias, GQA; bf16 shards written by odc-ckpt, bf16 shards + index + a
rotary inv_freq buffer written here), Qwen2 (q/k/v biases implied by the architecture, tied
embeddings; f32 written by odc-ckpt, f16 written here) and Qwen3 (q/k norms implied by the
architecture, head_dim unlike hidden_size / heads, tied; bf16 by odc-ckpt, f32 shards here).

Tolerance: max |ours - reference| / max |reference| <= 1e-5 per logits matrix, as in
test_model_parity.py. Both sides use the very same weights (the stored bf16/f16/f32 values are
exact in float64), so the difference is only our fp32 arithmetic against float64: ~1e-7
relative per operation, accumulated over two layers and dot products of <= 48 terms, lands
around 1e-6. A wrong tensor mapping, a missing bias or an untied head is O(1e-1).
"""

import argparse
import json
import os
import random
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402

TOL_LOGITS = 1e-5
# A perturbation of the constant tensors must move the logits far beyond the tolerance, or the
# comparison could not tell a dropped bias or a swapped norm from a correct load.
MIN_SENSITIVITY = 100 * TOL_LOGITS

SHAPE = {
    "vocab_size": 61,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 64,
    "initializer_range": 0.05,
}

CASES = [
    {
        "name": "llama_gqa_untied",
        "config": dict(SHAPE, architectures=["LlamaForCausalLM"], model_type="llama", rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False, hidden_act="silu",
                       bos_token_id=1, eos_token_id=2),
        "init_dtype": "bf16",
        "init_max_shard_bytes": 6000,
        "seed": 3,
        "rewrite_dtype": "BF16",
        "rewrite_shards": 2,
    },
    {
        "name": "qwen2_bias_tied",
        # No attention_bias: Qwen2 always has q/k/v biases.
        "config": dict(SHAPE, architectures=["Qwen2ForCausalLM"], model_type="qwen2", rms_norm_eps=1e-6,
                       rope_theta=1000000.0, tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False,
                       sliding_window=4096, max_window_layers=2, torch_dtype="bfloat16"),
        "init_dtype": "f32",
        "init_max_shard_bytes": None,
        "seed": 11,
        "rewrite_dtype": "F16",
        "rewrite_shards": 1,
    },
    {
        "name": "qwen3_qk_norm_tied",
        # Qwen3-0.6B-like: q/k norms (model_type qwen3), head_dim 12 != hidden_size / heads, no biases,
        # tied embeddings, the sliding window off.
        "config": dict(SHAPE, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=12, rms_norm_eps=1e-6,
                       rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False, hidden_act="silu",
                       use_sliding_window=False, sliding_window=None, max_window_layers=2, torch_dtype="bfloat16",
                       bos_token_id=151643, eos_token_id=151645),
        "init_dtype": "bf16",
        "init_max_shard_bytes": None,
        "seed": 17,
        "rewrite_dtype": "F32",
        "rewrite_shards": 2,
    },
]

ST_CODES = {"bf16": "BF16", "f32": "F32", "f16": "F16"}
TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "f32": "float32", "f16": "float16"}


def reference_config(hf):
    """llama_ref.Config plus the architecture rules the reference applies itself."""
    cfg = llama_ref.Config(hf)
    arch = (hf.get("architectures") or [None])[0]
    if arch == "Qwen2ForCausalLM":
        cfg.attention_bias = True  # HF's Qwen2Attention always has q/k/v biases
    return cfg


def read_checkpoint(directory):
    """{name: (dtype code, numpy array)} of a checkpoint directory: the index's shards, or
    model.safetensors. Checks that every index entry is in its shard and nothing else is."""
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, ["model.safetensors"]
    tensors = {}
    for name in files:
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        header.pop("__metadata__", None)
        arrays, _ = llama_ref.read_safetensors(path)
        for tensor, entry in header.items():
            if weight_map is not None and weight_map.get(tensor) != name:
                raise AssertionError(f"{path}: tensor {tensor} is not mapped to this shard by the index")
            tensors[tensor] = (entry["dtype"], arrays[tensor])
    if weight_map is not None and set(weight_map) != set(tensors):
        raise AssertionError(f"{directory}: index lists {sorted(set(weight_map) - set(tensors))} not in any shard")
    return tensors


def encode(values, code):
    """float64 array -> (raw little-endian bytes, the exactly stored values as float64)."""
    t = torch.tensor(values, dtype=torch.float64)
    if code == "BF16":
        stored = t.to(torch.bfloat16)
        return stored.view(torch.int16).numpy().astype("<i2").tobytes(), stored.to(torch.float64).numpy()
    if code == "F16":
        stored = t.to(torch.float16)
        return stored.view(torch.int16).numpy().astype("<i2").tobytes(), stored.to(torch.float64).numpy()
    assert code == "F32", code
    stored = t.to(torch.float32)
    return stored.numpy().astype("<f4").tobytes(), stored.to(torch.float64).numpy()


def write_safetensors(path, entries):
    """entries: [(name, dtype code, shape, raw bytes)], written back to back after the header."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, code, shape, raw in entries:
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in entries:
            f.write(raw)


def write_checkpoint(directory, config_json, params, code, shards, extra=()):
    """Writes config.json and the params (float64 arrays) as `code`, in `shards` files (+ index
    when more than one). Returns the stored values as float64 arrays."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2)
    stored, entries = {}, []
    for name, values in params.items():
        raw, stored[name] = encode(values, code)
        entries.append((name, code, values.shape, raw))
    entries += list(extra)
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), entries)
        return stored
    per_shard = -(-len(entries) // shards)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        chunk = entries[s * per_shard : (s + 1) * per_shard]
        write_safetensors(os.path.join(directory, file), chunk)
        weight_map.update({name: file for name, _, _, _ in chunk})
    total = sum(len(raw) for _, _, _, raw in entries)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return stored


def rel_err(ours, ref):
    scale = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(np.asarray(ours, dtype=np.float64) - ref))) / scale


def run(cmd, what, failures):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        failures.append(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return None
    return proc.stdout


def reference_logits(cfg, params, batch):
    tensors = {name: torch.tensor(np.asarray(a, dtype=np.float64)) for name, a in params.items()}
    with torch.no_grad():
        return llama_ref.forward(cfg, tensors, batch).numpy()


def run_case(case, tools, workdir, sequences, rows):
    failures = []
    name = case["name"]
    case_dir = os.path.join(workdir, name)
    os.makedirs(case_dir, exist_ok=True)
    config_in = os.path.join(case_dir, "config_in.json")
    with open(config_in, "w") as f:
        json.dump(case["config"], f, indent=2)
    case_path = os.path.join(case_dir, "case.json")
    with open(case_path, "w") as f:
        json.dump({"sequences": sequences}, f)
    batch = llama_ref.pack([(ids, [1] * len(ids)) for ids in sequences], 1.0)

    # 1. odc-ckpt init, read back by this script.
    init_dir = os.path.join(case_dir, "init")
    cmd = [tools["odc-ckpt"], "init", "--config", config_in, "--out", init_dir, "--dtype", case["init_dtype"],
           "--seed", str(case["seed"])]
    if case["init_max_shard_bytes"]:
        cmd += ["--max-shard-bytes", str(case["init_max_shard_bytes"])]
    if run(cmd, f"[{name}] odc-ckpt init", failures) is None:
        return failures
    with open(os.path.join(init_dir, "config.json")) as f:
        written_config = json.load(f)
    for key, value in case["config"].items():
        if key in ("torch_dtype", "sliding_window", "max_window_layers", "use_sliding_window", "bos_token_id",
                   "eos_token_id"):
            continue  # not model-shape fields: rewritten (torch_dtype) or not carried over
        if written_config.get(key) != value:
            failures.append(f"[{name}] config.json {key} = {written_config.get(key)!r}, expected {value!r}")
    if written_config.get("torch_dtype") != TORCH_DTYPE_NAMES[case["init_dtype"]]:
        failures.append(f"[{name}] config.json torch_dtype = {written_config.get('torch_dtype')!r}")
    cfg = reference_config(written_config)
    init = read_checkpoint(init_dir)
    expected_shapes = llama_ref.parameter_shapes(cfg)
    if set(init) != set(expected_shapes):
        failures.append(f"[{name}] tensors: only written {sorted(set(init) - set(expected_shapes))}, "
                        f"only expected {sorted(set(expected_shapes) - set(init))}")
        return failures
    for tensor, shape in expected_shapes.items():
        code, array = init[tensor]
        if tuple(array.shape) != shape or code != ST_CODES[case["init_dtype"]]:
            failures.append(f"[{name}] {tensor}: {code} {tuple(array.shape)}, expected "
                            f"{ST_CODES[case['init_dtype']]} {shape}")
    if case["init_max_shard_bytes"] and not os.path.exists(os.path.join(init_dir, "model.safetensors.index.json")):
        failures.append(f"[{name}] odc-ckpt init --max-shard-bytes wrote no index")
    if failures:
        return failures
    init_params = {t: np.asarray(a, dtype=np.float64) for t, (_, a) in init.items()}

    # 2. Rewritten by this script, constant tensors perturbed.
    rng = np.random.default_rng(case["seed"])
    perturbed = {}
    for tensor, values in init_params.items():
        constant = tensor.endswith("norm.weight") or tensor.endswith(".bias")
        perturbed[tensor] = values + rng.uniform(-0.3, 0.3, values.shape) if constant else values
    extra = []
    if case["rewrite_shards"] > 1:  # an older export's rotary buffer, which loaders ignore
        inv_freq = np.asarray(llama_ref.rope_inv_freq(cfg), dtype="<f4")
        extra.append(("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", inv_freq.shape, inv_freq.tobytes()))
    rewrite_dir = os.path.join(case_dir, "rewritten")
    rewritten = write_checkpoint(rewrite_dir, case["config"], perturbed, case["rewrite_dtype"], case["rewrite_shards"],
                                 extra)

    # 3. Logits of both through HfCheckpoint + LlamaModel, against the reference.
    for label, directory, params in (("init", init_dir, init_params), ("rewritten", rewrite_dir, rewritten)):
        out = os.path.join(case_dir, f"logits_{label}.safetensors")
        if run([tools["dump"], "--checkpoint", directory, "--case", case_path, "--out", out],
               f"[{name}] odc_hf_logits_dump {label}", failures) is None:
            continue
        ours, meta = llama_ref.read_safetensors(out)
        ref = reference_logits(cfg, params, batch)
        if ours["logits"].shape != ref.shape:
            failures.append(f"[{name}] {label}: logits shape {ours['logits'].shape}, reference {ref.shape}")
            continue
        err = rel_err(ours["logits"], ref)
        rows.append((name, label, meta.get("dtype"), ref.shape, err))
        if not err <= TOL_LOGITS:
            failures.append(f"[{name}] {label}: logits relative error {err:.3e} > {TOL_LOGITS:.0e}")

    # The perturbation must matter: the reference with the unperturbed constants is far away.
    baseline = reference_logits(cfg, {t: (init_params[t] if (t.endswith("norm.weight") or t.endswith(".bias"))
                                          else v) for t, v in rewritten.items()}, batch)
    sensitivity = rel_err(baseline, reference_logits(cfg, rewritten, batch))
    rows.append((name, "sensitivity", "-", baseline.shape, sensitivity))
    if sensitivity < MIN_SENSITIVITY:
        failures.append(f"[{name}] perturbing norms/biases moved the logits by only {sensitivity:.2e}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", required=True, help="path to odc_parity_dump (its directory holds the tools)")
    parser.add_argument("--workdir", required=True, help="scratch directory for checkpoints and outputs")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    bin_dir = os.path.dirname(os.path.abspath(args.dump))
    tools = {"odc-ckpt": os.path.join(bin_dir, "odc-ckpt"), "dump": os.path.join(bin_dir, "odc_hf_logits_dump")}
    for tool in tools.values():
        if not os.access(tool, os.X_OK):
            print(f"FAILED: {tool} is missing (build the odc-ckpt and odc_hf_logits_dump targets)", file=sys.stderr)
            return 1
    os.makedirs(args.workdir, exist_ok=True)

    rng = random.Random(99)
    sequences = [[rng.randrange(SHAPE["vocab_size"]) for _ in range(n)] for n in (11, 5, 17)]
    failures, rows = [], []
    for case in CASES:
        failures += run_case(case, tools, args.workdir, sequences, rows)

    print(f"{'case':<18} {'checkpoint':<12} {'dtype':<9} {'logits':<9} {'rel.err':>10}  (tol {TOL_LOGITS:.0e})")
    for name, label, dtype, shape, err in rows:
        print(f"{name:<18} {label:<12} {dtype:<9} {f'{shape[0]}x{shape[1]}':<9} {err:10.3e}")
    if failures:
        print("\nFAILED:", file=sys.stderr)
        for failure in failures:
            print("  " + failure, file=sys.stderr)
        return 1
    print("\nHF checkpoint parity: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

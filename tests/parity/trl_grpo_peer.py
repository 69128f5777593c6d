#!/usr/bin/env python3
"""GRPO's objective against TRL's GRPOTrainer: loss, gradients and diagnostics on fixed rollouts.

One tiny LLaMA made by transformers (random init, save_pretrained, fp32) and fixed rollouts: P
prompts of one length, G completions each of ragged lengths (random tokens), rewards per
completion, and the sampling policy's and the reference policy's per-token log-probabilities set
to the model's own plus Gaussian noise (so the ratios spread over and beyond the clip range and
the KL is not zero). Both sides see the same records:

  TRL   GRPOTrainer._compute_loss(model, inputs) on the whole batch (one process, no accumulation),
        its advantages computed from the rewards as GRPOTrainer does (group mean, TRL's nanstd,
        / (std + 1e-4)); then loss.backward() and one torch.optim.AdamW step on those gradients;
  ours  odc-train with train.objective grpo on the records written as data.format rollouts (rewards
        and groups: our advantages), one step over the whole batch, its HF export.

AdamW's first step divides each gradient by |g| + eps; with eps = 1 (train.eps / adam eps) the
update is g / (|g| + 1) * lr, a gradient-preserving map, so comparing the updates (final - initial,
per tensor) compares the gradients themselves through the whole trainer (packing, planner, comm).

Cases: each rl.loss_aggregation (TRL's loss_type grpo, dapo and dr_grpo; TRL's bnpo equals dapo on
one batch and is checked as dapo's peer), with and without the KL penalty (ratio-weighted, TRL's
default use_bias_correction_kl, and plain k3), with DAPO's clip-higher (epsilon_high > epsilon), at a
softmax temperature of 0.7 (TRL's temperature, our rl.temperature), and one on 2 ranks under ODC
(mpirun). A control run (ours with
rl.loss_aggregation grpo against TRL's dapo) must miss the tolerance.

Tolerances (fp32 on both sides; only the summation order differs: GEMMs, attention, the
log-softmax, how tokens are packed into microbatches): loss 1e-5 relative (plus 1e-7 absolute:
the loss is a sum of signed terms and may be near 0), grad norm 1e-4 relative, update 1e-3 relative per tensor (|dW_ours - dW_trl| / |dW_trl|), entropy, KL and clip
fractions 1e-4 absolute (a clip fraction moves by 1/tokens = 1e-2 when one token flips).

usage: trl_grpo_peer.py --bin build/bin [--out DIR] [--mpirun mpirun]
Exit 0 within tolerance, 1 outside it, 77 skipped (torch, transformers, trl or datasets missing).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

SKIPPED = 77
LOSS_RTOL, LOSS_ATOL, GRAD_NORM_RTOL, UPDATE_RTOL, METRIC_ATOL = 1e-5, 1e-7, 1e-4, 1e-3, 1e-4
PROMPTS, GENERATIONS, PROMPT_LENGTH, MAX_COMPLETION = 3, 4, 6, 12
MODEL = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": False}
LR, ADAM_EPS = 1.0, 1.0

CASES = [
    {"name": "grpo", "loss_type": "grpo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.2, "ranks": 1},
    {"name": "dapo", "loss_type": "dapo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.2, "ranks": 1},
    {"name": "bnpo (= dapo on one batch)", "loss_type": "bnpo", "ours": "dapo", "beta": 0.0, "epsilon": 0.2,
     "epsilon_high": 0.2, "ranks": 1},
    {"name": "dr_grpo", "loss_type": "dr_grpo", "beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.2, "ranks": 1},
    {"name": "grpo + KL", "loss_type": "grpo", "beta": 0.04, "epsilon": 0.2, "epsilon_high": 0.2, "ranks": 1},
    {"name": "dapo + KL + clip-higher", "loss_type": "dapo", "beta": 0.1, "epsilon": 0.2, "epsilon_high": 0.28,
     "ranks": 1},
    {"name": "grpo + plain k3 KL (use_bias_correction_kl off)", "loss_type": "grpo", "beta": 0.04, "epsilon": 0.2,
     "epsilon_high": 0.2, "ranks": 1, "kl_ratio_weighted": False},
    {"name": "grpo + KL at temperature 0.7", "loss_type": "grpo", "beta": 0.04, "epsilon": 0.2, "epsilon_high": 0.2,
     "ranks": 1, "temperature": 0.7},
    {"name": "dr_grpo + KL, 2 ranks ODC", "loss_type": "dr_grpo", "beta": 0.04, "epsilon": 0.2, "epsilon_high": 0.2,
     "ranks": 2},
]
CONTROL = {"name": "control: ours grpo vs TRL dapo", "loss_type": "dapo", "ours": "grpo", "beta": 0.0, "epsilon": 0.2,
           "epsilon_high": 0.2, "ranks": 1}


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def make_fixtures(out, seed=0):
    """The model and tokenizer directory, and the rollouts (token ids, log-probabilities, rewards)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(MODEL["vocab_size"])}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t1"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="t0", eos_token="t2", unk_token="t1")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(pad_token_id=0, eos_token_id=2, bos_token_id=3, **MODEL))
    model_dir = os.path.join(out, "model")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    generator = torch.Generator().manual_seed(seed + 1)
    batch = PROMPTS * GENERATIONS
    prompts = torch.randint(4, MODEL["vocab_size"], (PROMPTS, PROMPT_LENGTH), generator=generator)
    prompt_ids = prompts.repeat_interleave(GENERATIONS, dim=0)
    lengths = torch.randint(2, MAX_COMPLETION + 1, (batch,), generator=generator)
    lengths[0] = MAX_COMPLETION  # the padded width is the longest completion
    completion_ids = torch.zeros(batch, MAX_COMPLETION, dtype=torch.long)
    mask = torch.zeros(batch, MAX_COMPLETION, dtype=torch.long)
    for i in range(batch):
        n = int(lengths[i])
        completion_ids[i, :n] = torch.randint(4, MODEL["vocab_size"], (n,), generator=generator)
        mask[i, :n] = 1
    with torch.no_grad():
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], dim=1)).logits
        logps = torch.log_softmax(logits[:, PROMPT_LENGTH - 1:-1].double(), dim=-1)
        current = logps.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    # Noise sized so that a good share of the ratios falls outside [0.8, 1.28].
    old = (current + 0.25 * torch.randn(current.shape, generator=generator, dtype=torch.float64)).clamp(max=-1e-3)
    ref = (current + 0.3 * torch.randn(current.shape, generator=generator, dtype=torch.float64)).clamp(max=-1e-3)
    old, ref = old.float(), ref.float()
    rewards = torch.rand(batch, generator=generator, dtype=torch.float64).round(decimals=3)
    rollouts = os.path.join(out, "rollouts.jsonl")
    with open(rollouts, "w") as f:
        for i in range(batch):
            n = int(lengths[i])
            f.write(json.dumps({"prompt_ids": prompt_ids[i].tolist(), "completion_ids": completion_ids[i, :n].tolist(),
                                "logprobs": [float(x) for x in old[i, :n]],
                                "ref_logprobs": [float(x) for x in ref[i, :n]],
                                "reward": float(rewards[i]), "group": i // GENERATIONS}) + "\n")
    data = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "mask": mask, "old": old, "ref": ref,
            "rewards": rewards.float()}
    return model_dir, rollouts, data


def trl_advantages(rewards):
    """GRPOTrainer's group-relative advantages (scale_rewards "group"), with TRL's own nanstd."""
    import torch
    from trl.trainer.utils import nanstd
    grouped = rewards.view(-1, GENERATIONS)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(GENERATIONS, dim=0)
    std = nanstd(grouped, dim=1).repeat_interleave(GENERATIONS, dim=0)
    return torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)


def run_trl(model_dir, data, case, out):
    """TRL's objective on the whole batch: loss, gradient norm, metrics and the AdamW update per tensor."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    batch = PROMPTS * GENERATIONS
    args = GRPOConfig(output_dir=os.path.join(out, "trl"), loss_type=case["loss_type"], beta=case["beta"],
                      epsilon=case["epsilon"], epsilon_high=case["epsilon_high"],
                      use_bias_correction_kl=case.get("kl_ratio_weighted", True),
                      max_completion_length=MAX_COMPLETION, num_generations=GENERATIONS,
                      per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
                      temperature=case.get("temperature", 1.0), learning_rate=LR, adam_epsilon=ADAM_EPS, weight_decay=0.0,
                      bf16=False, use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=datasets.Dataset.from_dict({"prompt": ["t4"] * batch}),
                          processing_class=tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    mask = data["mask"]
    inputs = {"prompt_ids": data["prompt_ids"], "prompt_mask": torch.ones_like(data["prompt_ids"]),
              "completion_ids": data["completion_ids"], "completion_mask": mask,
              "advantages": trl_advantages(data["rewards"]), "old_per_token_logps": data["old"],
              "num_items_in_batch": mask.sum()}
    if case["beta"] != 0.0:
        inputs["ref_per_token_logps"] = data["ref"]
    params = dict(trainer.model.named_parameters())
    initial = {name: p.detach().clone() for name, p in params.items()}
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grad_norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params.values() if p.grad is not None))
    optimizer = torch.optim.AdamW(params.values(), lr=LR, eps=ADAM_EPS, weight_decay=0.0, betas=(0.9, 0.95))
    optimizer.step()
    updates = {name: (p.detach() - initial[name]).double() for name, p in params.items()}
    logged = trainer._metrics["train"]
    metrics = {"entropy": logged["entropy"][-1], "clip_low": logged["clip_ratio/low_mean"][-1],
               "clip_high": logged["clip_ratio/high_mean"][-1]}
    if case["beta"] != 0.0:
        metrics["kl"] = logged["kl"][-1]
    return float(loss.detach()), grad_norm, metrics, updates


def run_ours(binaries, mpirun, model_dir, rollouts, case, out, name):
    """odc-train: one grpo step over the whole batch; its metrics line and the update per tensor."""
    import torch
    from safetensors.torch import load_file

    metrics_path, export = os.path.join(out, f"{name}.metrics.jsonl"), os.path.join(out, f"{name}-final")
    shutil.rmtree(export, ignore_errors=True)
    if os.path.exists(metrics_path):
        os.remove(metrics_path)
    sets = {"model.checkpoint": model_dir, "data.train": rollouts, "data.format": "rollouts",
            "data.global_batch_size": PROMPTS * GENERATIONS, "data.shuffle": "false", "data.balance": "lb_mini",
            "train.objective": "grpo", "rl.loss_aggregation": case.get("ours", case["loss_type"]),
            "rl.epsilon": case["epsilon"], "rl.epsilon_high": case["epsilon_high"], "rl.kl_beta": case["beta"],
            "rl.kl_ratio_weighted": str(case.get("kl_ratio_weighted", True)).lower(),
            "rl.temperature": case.get("temperature", 1.0),
            "rl.max_completion_length": MAX_COMPLETION, "train.steps": 1, "train.lr": LR, "train.min_lr": 0,
            "train.schedule": "constant", "train.warmup_steps": 0, "train.eps": ADAM_EPS, "train.beta2": 0.95,
            "train.weight_decay": 0.0, "train.grad_clip": 0.0, "train.comm": "odc",
            "train.metrics_file": metrics_path, "checkpoint.export_hf": export, "train.log_level": "warn"}
    command = [os.path.join(binaries, "odc-train")] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    if case["ranks"] > 1:
        command = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(case["ranks"])] + command
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: odc-train failed (exit {done.returncode}):\n{done.stdout[-4000:]}")
    with open(metrics_path) as f:
        record = json.loads(f.readline())
    initial = load_file(os.path.join(model_dir, "model.safetensors"))
    final = load_file(os.path.join(export, "model.safetensors"))
    updates = {n: final[n].double() - initial[n].double() for n in initial}
    policy = record["policy"]
    metrics = {"entropy": policy["entropy"], "clip_low": policy["clip_low"], "clip_high": policy["clip_high"],
               "kl": policy["kl"]}
    return record["loss"], record["grad_norm"], metrics, updates


def compare(case, trl, ours):
    """(row for the table, failures)."""
    trl_loss, trl_norm, trl_metrics, trl_updates = trl
    loss, norm, metrics, updates = ours
    failures = []
    loss_err, norm_err = relative(loss, trl_loss), relative(norm, trl_norm)
    # The loss is a sum of signed terms (advantages centre on 0): relative to its value, with a floor.
    if abs(loss - trl_loss) > LOSS_RTOL * abs(trl_loss) + LOSS_ATOL:
        failures.append(f"loss {loss!r} vs TRL {trl_loss!r} (|diff| {abs(loss - trl_loss):.2e} > "
                        f"{LOSS_RTOL} x |loss| + {LOSS_ATOL})")
    if norm_err > GRAD_NORM_RTOL:
        failures.append(f"grad norm {norm!r} vs TRL {trl_norm!r} (relative {norm_err:.2e} > {GRAD_NORM_RTOL})")
    worst, worst_name = 0.0, ""
    for name, expected in trl_updates.items():
        if name not in updates:
            failures.append(f"{name}: missing from our export")
            continue
        err = float((updates[name] - expected).norm() / max(float(expected.norm()), 1e-30))
        if err > worst:
            worst, worst_name = err, name
    if worst > UPDATE_RTOL:
        failures.append(f"update of {worst_name} off by {worst:.2e} relative (> {UPDATE_RTOL})")
    metric_err = 0.0
    for key, expected in trl_metrics.items():
        err = abs(metrics[key] - expected)
        metric_err = max(metric_err, err)
        if err > METRIC_ATOL:
            failures.append(f"{key} {metrics[key]!r} vs TRL {expected!r} (|diff| {err:.2e} > {METRIC_ATOL})")
    row = {"case": case["name"], "ranks": case["ranks"], "trl_loss": trl_loss, "loss_rel": loss_err,
           "grad_norm_rel": norm_err, "update_rel_max": worst, "metric_abs_max": metric_err,
           "clip_low": trl_metrics["clip_low"], "clip_high": trl_metrics["clip_high"]}
    return row, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True, help="directory holding odc-train")
    parser.add_argument("--out", default="bench-out/trl_grpo")
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    try:
        import datasets  # noqa: F401
        import safetensors  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: {e} (the Python environment of scripts/setup.sh is missing)")
        return SKIPPED
    os.makedirs(args.out, exist_ok=True)
    model_dir, rollouts, data = make_fixtures(args.out)
    rows, failed = [], False
    for index, case in enumerate(CASES + [CONTROL]):
        trl_side = run_trl(model_dir, data, case, args.out)
        ours = run_ours(args.bin, args.mpirun, model_dir, rollouts, case, args.out, f"case{index}")
        row, failures = compare(case, trl_side, ours)
        rows.append(row)
        if case is CONTROL:
            row["verdict"] = "missed, as it must" if failures else "WITHIN (the comparison cannot see the change)"
            failed |= not failures
        else:
            row["verdict"] = "ok" if not failures else "FAILED: " + "; ".join(failures)
            failed |= bool(failures)
    header = ("| case | ranks | TRL loss | loss rel. err | grad norm rel. err | update rel. err (worst tensor) | "
              "metrics abs. err | clipped low / high | verdict |")
    lines = [header, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['case']} | {r['ranks']} | {r['trl_loss']:.6f} | {r['loss_rel']:.1e} | "
                     f"{r['grad_norm_rel']:.1e} | {r['update_rel_max']:.1e} | {r['metric_abs_max']:.1e} | "
                     f"{100 * r['clip_low']:.1f}% / {100 * r['clip_high']:.1f}% | {r['verdict']} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

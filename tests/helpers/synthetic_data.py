"""Synthetic token data of the Python tests (parity scripts, the CLI tests' Python pieces), written
once: random SFT records and their JSONL files. The tests' numbers depend on this data: the draws
are `rng.randrange(vocab)` per token, in order, and nothing else."""
import json


def random_record(rng, vocab, n, prompt=0):
    """n tokens drawn from rng below vocab; the loss mask is 0 on the first `prompt` (a prompt
    without loss) and 1 after."""
    return {"input_ids": [rng.randrange(vocab) for _ in range(n)],
            "loss_mask": [0 if i < prompt else 1 for i in range(n)]}


def write_jsonl(path, records):
    """One json.dumps line per record."""
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")

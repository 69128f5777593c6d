#!/usr/bin/env python3
"""The demos' held-out accuracy: odc-rollout answers every prompt of a prompts file
({"prompt", "answer"} per line, tools/make_demo_chat.py --heldout) with the model, scores each
completion by exact match against the answer (odc-rollout's `exact` verifier), and this prints the
accuracy overall and per task (the prompt's text before its colon: reverse, repeat, sort, length).

Greedy by default (one completion per prompt, --top-k 1); --sampled G draws G completions per
prompt at temperature 1 (what GRPO's rollouts draw). Prints one line for people, e.g.

  held-out accuracy 0.990 (200 prompts, greedy): length 1.00, repeat 0.96, reverse 1.00, sort 1.00

or, with --json, {"accuracy": ..., "per_task": {...}, "prompts": N, "completions": M, "mode": ...}.
odc-rollout's own errors pass through with its exit status; its warning that a group of one cannot
train grpo is expected here (these records only measure) and is not shown.

usage: demo_accuracy.py --build BUILD --model DIR --prompts FILE --out RECORDS [--sampled G] [--json]
"""
import argparse
import collections
import json
import subprocess
import sys

GROUP_OF_ONE = "--group 1: every completion stands alone"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, help="the build directory (its bin/odc-rollout runs)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--out", required=True, help="where odc-rollout writes its records")
    parser.add_argument("--sampled", type=int, default=0, metavar="G",
                        help="G completions per prompt at temperature 1 (default: one greedy completion)")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.sampled < 0 or args.sampled == 1:
        parser.error(f"--sampled {args.sampled}: at least 2 completions per prompt (or leave it out for greedy)")
    try:
        prompts = [json.loads(line) for line in open(args.prompts) if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"demo_accuracy.py: error: --prompts {args.prompts}: {e}")
    mode = ["--group", "1", "--top-k", "1"] if args.sampled == 0 else ["--group", str(args.sampled)]
    command = [f"{args.build}/bin/odc-rollout", "--model", args.model, "--prompts", args.prompts, "--out", args.out,
               "--chat", "--concurrency", "64", "--max-new-tokens", str(args.max_new_tokens), "--seed", "7"] + mode
    run = subprocess.run(command, capture_output=True, text=True)
    shown = [line for line in run.stderr.splitlines() if GROUP_OF_ONE not in line]
    if run.returncode != 0:
        sys.stderr.write("\n".join(shown) + "\n")
        sys.exit(run.returncode)
    per_task = collections.defaultdict(list)
    records = [json.loads(line) for line in open(args.out)]
    for record in records:
        per_task[prompts[record["group"]]["prompt"].split(":")[0]].append(record["reward"])
    accuracy = sum(r["reward"] for r in records) / len(records)
    tasks = {task: sum(v) / len(v) for task, v in sorted(per_task.items())}
    label = "greedy" if args.sampled == 0 else f"{args.sampled} sampled each at temperature 1"
    if args.json:
        print(json.dumps({"accuracy": accuracy, "per_task": tasks, "prompts": len(prompts),
                          "completions": len(records), "mode": label}))
    else:
        print(f"  held-out accuracy {accuracy:.3f} ({len(prompts)} prompts, {label}): "
              + ", ".join(f"{task} {value:.2f}" for task, value in tasks.items()))


if __name__ == "__main__":
    main()

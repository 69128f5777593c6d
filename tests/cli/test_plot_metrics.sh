#!/usr/bin/env bash
# tools/plot_metrics.py draws one panel per series a metrics file holds (loss, lr, gradient norm,
# tokens/s; eval loss only when there are eval lines), says which, with the moving-average window
# in the legend; prints the first and last step's loss and the 10% means under those names; a broken line
# is an error naming file and line. Usage: test_plot_metrics.sh BIN_DIR WORK_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
python=${PYTHON:-}
for candidate in "$python" "${ODC_PYTHON_ENV:-$HOME/.cache/odc/python}/bin/python" /usr/bin/python3; do
  if [ -n "$candidate" ] && "$candidate" -c "import matplotlib" 2>/dev/null; then python=$candidate; break; fi
  python=""
done
[ -n "$python" ] || { echo "skip: no Python with matplotlib"; exit 0; }

# 40 steps (a real metrics line's fields), an eval line after step 20 and after step 40.
"$python" - "$work/m.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 41):
        f.write(json.dumps({"step": s, "loss": 4.0 - s * 0.05, "lr": 1e-3 * min(1, s / 5), "grad_norm": 1.0 + 1 / s,
                            "tokens_per_s": 1000 + s, "mfu": 0.2}) + "\n")
        if s % 20 == 0:
            f.write(json.dumps({"step": s, "eval_loss": 3.5 - s * 0.01, "eval_perplexity": 30.0}) + "\n")
PY
head -40 "$work/m.jsonl" | grep -v eval_loss >"$work/no-eval.jsonl"

out=$("$python" "$root/tools/plot_metrics.py" "$work/m.jsonl" --out "$work/m.png" --check-decrease 2>&1) \
  || fail "plot with eval lines" "$out"
echo "$out" | grep -q '"panels": \["loss", "lr", "grad_norm", "eval_loss", "tokens_per_s"\]' \
  && echo "ok   [five panels with eval lines]" || fail "five panels with eval lines" "$out"
[ -s "$work/m.png" ] || fail "the PNG is written" "$(ls -l "$work")"
# loss = 4 - 0.05 s over steps 1..40: the first and last step's loss 3.95 and 2.0, the means of the
# first and last 4 steps (10%) 3.875 and 2.075, drop 1 - 2.075 / 3.875 = 0.4645.
echo "$out" | grep -qF '"steps": 40, "loss_first": 3.95, "loss_last": 2.0, "loss_mean_first_10pct": 3.875, "loss_mean_last_10pct": 2.075, "drop": 0.4645' \
  && echo "ok   [loss_first/loss_last are the first and last step's, the 10% means named so]" \
  || fail "loss_first/loss_last are the first and last step's, the 10% means named so" "$out"
# --check-decrease compares the means: a last step back up at the first loss does not decide it.
"$python" -c '
import json, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 41):
        f.write(json.dumps({"step": s, "loss": 4.0 if s == 40 else 4.0 - s * 0.05}) + "\n")' "$work/spike.jsonl"
out=$("$python" "$root/tools/plot_metrics.py" "$work/spike.jsonl" --out "$work/s.png" --check-decrease 2>&1) \
  && echo "ok   [--check-decrease on the 10% means]" || fail "--check-decrease on the 10% means" "$out"
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n' >"$work/flat.jsonl"
out=$("$python" "$root/tools/plot_metrics.py" "$work/flat.jsonl" --out "$work/f.png" --check-decrease 2>&1) \
  && fail "a 5% fall fails --check-decrease" "$out"
echo "$out" | grep -qF "loss did not fall by 10% (mean of the first 1 step(s) 2.0000, of the last 1 1.9000)" \
  && echo "ok   [a 5% fall fails --check-decrease, naming the means]" || fail "a 5% fall fails --check-decrease, naming the means" "$out"

out=$("$python" "$root/tools/plot_metrics.py" "$work/no-eval.jsonl" --out "$work/n.png" 2>&1) || fail "plot without eval" "$out"
echo "$out" | grep -q '"panels": \["loss", "lr", "grad_norm", "tokens_per_s"\]' \
  && echo "ok   [no eval panel without eval lines]" || fail "no eval panel without eval lines" "$out"

# The smoothing legend names the window: 40 steps / 20 = 2 by default.
legend=$("$python" - "$root/tools/plot_metrics.py" "$work/m.jsonl" "$work/l.png" <<'PY'
import runpy, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
saved = plt.Figure.savefig
def capture(fig, *a, **k):
    for ax in fig.axes:
        print(ax.get_title(loc="left"), "|", " / ".join(t.get_text() for t in ax.get_legend().get_texts()))
    return saved(fig, *a, **k)
plt.Figure.savefig = capture
script = sys.argv[1]
sys.argv = [script, sys.argv[2], "--out", sys.argv[3]]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    pass
PY
)
echo "$legend" | grep -q "^loss | m.jsonl (each step) / m.jsonl (moving average of 2 steps)" \
  && echo "ok   [smoothing legend names the window]" || fail "smoothing legend names the window" "$legend"

# A missing file (or a directory): one line naming it, exit non-zero (it was a Python traceback).
for missing in "$work/absent.jsonl" "$work"; do
  out=$("$python" "$root/tools/plot_metrics.py" "$missing" --out "$work/m.png" 2>&1) && fail "a missing file fails" "$out"
  [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "^plot_metrics.py: $missing: cannot be read (" <<<"$out" &&
    ! grep -q Traceback <<<"$out" && echo "ok   [a missing file is one line naming it]" ||
    fail "a missing file is one line naming it" "$out"
done
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "lo\n' >"$work/torn.jsonl"
out=$("$python" "$root/tools/plot_metrics.py" "$work/torn.jsonl" --out "$work/t.png" 2>&1) && fail "a torn line fails" "$out"
echo "$out" | grep -q "torn.jsonl:2: not a JSON line" && echo "ok   [a torn line names file and line]" \
  || fail "a torn line names file and line" "$out"

finish_test "all ok"

# Shared helpers of the CLI tests, sourced after setting $tool (the executable under test) and
# $work_dir (emptied and created here). Each check counts failures instead of exiting, so one run
# reports every broken case; the test checks $failures at its end.
rm -rf "$work_dir"
mkdir -p "$work_dir"

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run_tool NAME ARGS...: runs $tool, keeping stdout/stderr in $work_dir/NAME.{out,err}, and sets
# $rc without tripping `set -e`.
run_tool() {
  local name=$1
  shift
  rc=0
  "$tool" "$@" >"$work_dir/$name.out" 2>"$work_dir/$name.err" || rc=$?
}

expect_rc() {  # NAME EXPECTED
  if [ "$rc" -ne "$2" ]; then
    fail "$1: exit code $rc, expected $2; stderr: $(cat "$work_dir/$1.err")"
  fi
}

expect_in() {  # NAME STREAM(out|err) TEXT
  if ! grep -qF -- "$3" "$work_dir/$1.$2"; then
    fail "$1: std$2 does not contain '$3'; it was: $(cat "$work_dir/$1.$2")"
  fi
}

[ -x "$tool" ] || { echo "FAIL: $tool is not an executable" >&2; exit 1; }

#!/usr/bin/env bash
# Installs what the project builds, tests and demos with. Idempotent, and a no-op when nothing
# changed:
#  1. Debian 12 packages (apt); a machine that already has every package skips apt entirely.
#  2. The Python environment of scripts/requirements.txt (PyPI: torch 2.x, transformers, tokenizers,
#     trl, and the packages that ship the tokenizer test's files), in a venv outside the source
#     tree: $ODC_PYTHON_ENV, default ~/.cache/odc/python (CMake looks in the same place; "off"
#     skips this step). A stamp in it holds requirements.txt's SHA-256, so it is rebuilt only when
#     that file changes. Without PyPI this step warns and the build goes on: CMake then runs the
#     Python tests with /usr/bin/python3 (Debian's python3-torch), and the tokenizer equality test,
#     which needs the environment, reports itself skipped.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin libucx-dev ucx-utils
  libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 libdnnl-dev nlohmann-json3-dev
  libpcre2-dev libicu-dev
  python3-torch python3-numpy python3-matplotlib python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -o DPkg::Lock::Timeout=600
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}"
fi

# ---- the Python environment (PyPI) ----
env_dir="${ODC_PYTHON_ENV:-${HOME:-}/.cache/odc/python}"
requirements="$root/scripts/requirements.txt"
if [ "$env_dir" = off ] || [ "$env_dir" = /.cache/odc/python ]; then
  echo "setup: no Python environment (ODC_PYTHON_ENV=off or no HOME)"
  exit 0
fi
if [ -e "$env_dir" ] && [ ! -f "$env_dir/pyvenv.cfg" ]; then
  # Never replace something that is not a venv (a mistyped ODC_PYTHON_ENV).
  echo "setup: WARNING: $env_dir exists and is not a Python venv: not touched, no Python environment" >&2
  exit 0
fi
stamp="$env_dir/odc-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -x "$env_dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "setup: Python environment $env_dir up to date"
  exit 0
fi

# A changed requirements file rebuilds the venv from scratch (no leftovers of old pins); the old
# one is kept aside and comes back if the new one cannot be installed.
echo "setup: installing the Python environment into $env_dir from PyPI (scripts/requirements.txt;" \
     "about 2.9 GB to download the first time, a few minutes)"
start=$SECONDS
mkdir -p "$(dirname "$env_dir")"
rm -rf "$env_dir.old"
[ ! -e "$env_dir" ] || mv "$env_dir" "$env_dir.old"
# --no-deps: requirements.txt pins every package, dependencies included, so pip resolves nothing;
# wheels only, so a platform without one fails here instead of compiling. Short network timeouts:
# an unreachable index fails in about a minute instead of hanging.
if /usr/bin/python3 -m venv "$env_dir" &&
   "$env_dir/bin/python" -m pip install --quiet --no-input --disable-pip-version-check --no-deps \
     --only-binary=:all: --timeout 30 --retries 2 --requirement "$requirements" &&
   versions=$("$env_dir/bin/python" -c 'import tokenizers, torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'); then
  echo "$want" >"$stamp"
  rm -rf "$env_dir.old"
  echo "setup: Python environment ready in $((SECONDS - start)) s: $env_dir ($versions)"
else
  rm -rf "$env_dir"
  echo "setup: WARNING: could not install the Python environment from PyPI (pip's message is above)." >&2
  if [ -e "$env_dir.old" ]; then
    mv "$env_dir.old" "$env_dir"
    echo "setup: WARNING: the build goes on with the previous environment in $env_dir (older pins)." >&2
  else
    echo "setup: WARNING: the build goes on without it: the tokenizer equality test will be skipped and" \
         "the PyTorch tests use /usr/bin/python3 (Debian's python3-torch)." >&2
  fi
  echo "setup: WARNING: run scripts/setup.sh again once PyPI is reachable." >&2
fi

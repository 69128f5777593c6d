#!/usr/bin/env bash
# Installs the Debian 12 packages the project builds, tests and demos with. Idempotent: a machine
# that already has every package skips apt entirely. (The tokenizer test installs its pinned npm
# packages into the build tree itself.)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin libucx-dev ucx-utils
  libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 libdnnl-dev nlohmann-json3-dev
  libpcre2-dev libicu-dev
  python3-torch python3-numpy python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The tokenizer equality test runs the reference JavaScript tokenizers: any node + npm will do (a
# machine may have them from elsewhere, e.g. NodeSource, which conflicts with Debian's npm).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present (and node/npm)"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -o DPkg::Lock::Timeout=600
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
  -o DPkg::Lock::Timeout=600 "${missing[@]}"

#!/usr/bin/env bash
# Installs the Debian 12 packages the project builds, tests and demos with. Idempotent: a machine
# that already has every package skips apt entirely. No other downloads.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin libucx-dev ucx-utils
  libyaml-cpp-dev libspdlog-dev libfmt-dev catch2 libopenblas-dev nlohmann-json3-dev
  libpcre2-dev libicu-dev
  python3-torch python3-numpy python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -o DPkg::Lock::Timeout=600
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
  -o DPkg::Lock::Timeout=600 "${missing[@]}"

#!/usr/bin/env bash
# Fixture of tokenizer/npm_equality: installs the pinned reference packages (package-lock.json) into
# NPM_DIR in the build tree, never into the source tree. Skips the install when NPM_DIR already holds
# exactly this lock file's packages.
# usage: npm_install.sh SOURCE_DIR NPM_DIR        (exit 77 = skipped: node/npm not installed)
set -euo pipefail
src=$1
dst=$2
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "npm_install: node and npm are required (Debian: apt-get install nodejs npm)" >&2
  exit 77
fi
stamp="$dst/installed-package-lock.json"
if [ -d "$dst/node_modules" ] && cmp -s "$src/package-lock.json" "$stamp"; then
  echo "npm_install: $dst is up to date"
  exit 0
fi
mkdir -p "$dst"
rm -f "$stamp"
cp "$src/package.json" "$src/package-lock.json" "$dst/"
(cd "$dst" && npm ci --no-audit --no-fund --loglevel=error)
cp "$src/package-lock.json" "$stamp"
echo "npm_install: installed into $dst"

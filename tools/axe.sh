#!/usr/bin/env bash
# axe-core (Deque's accessibility engine, MPL-2.0), which the dashboard's accessibility test
# runs inside headless Chromium, from the npm registry into the per-user cache (outside the
# clone, like the test environment's binaries). Prints the path of axe.min.js.
# Without npm it says so and the test skips (CI installs npm and requires it).
set -euo pipefail
VERSION="${GPUCARVE_AXE_VERSION:-4.14.1}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/gpucarve/axe-core-$VERSION"
FILE="$CACHE/node_modules/axe-core/axe.min.js"
if [ ! -f "$FILE" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "axe: npm not found: the dashboard's accessibility test will skip" >&2
    exit 0
  fi
  mkdir -p "$CACHE"
  npm install --prefix "$CACHE" --no-audit --no-fund --silent "axe-core@$VERSION" >&2
fi
echo "$FILE"

#!/usr/bin/env bash
# Configures and builds Troupe (Release) into build/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${TROUPE_JOBS:-$(nproc)}"
echo "build: configuring (Release) in build/"
cmake --preset release > build.log.tmp 2>&1 || { cat build.log.tmp; rm -f build.log.tmp; exit 1; }
grep -E "^-- troupe:" build.log.tmp || true
rm -f build.log.tmp
echo "build: compiling with $jobs jobs"
cmake --build --preset release -j "$jobs"

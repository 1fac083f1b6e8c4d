#!/usr/bin/env bash
# Sets up a fresh machine, builds Troupe, fetches the default model and runs it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/fetch-model.sh
bash scripts/build.sh
model="models/SmolLM2-135M-Instruct.Q4_1.gguf"
prompt="${TROUPE_PROMPT:-What is the capital of France? Answer in one sentence.}"
exec ./build/troupe generate --model "$model" --chat --max-tokens 64 --prompt "$prompt"

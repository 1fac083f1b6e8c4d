#!/usr/bin/env bash
# Sets up a fresh machine, builds Troupe, fetches the default model and serves it: an
# OpenAI-compatible HTTP API and a WebSocket token stream on 127.0.0.1:8080 (TROUPE_LISTEN to
# change), with the chat page at the printed URL. Ctrl-C stops it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/fetch-model.sh
bash scripts/build.sh
exec ./build/troupe serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --listen "${TROUPE_LISTEN:-127.0.0.1:8080}"

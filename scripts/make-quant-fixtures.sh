#!/usr/bin/env bash
# Regenerates tests/fixtures/quant/: blocks of Q5_0, Q5_1, Q2_K, Q3_K and Q5_K made by ggml and
# ggml's own dequantization of them, which tests/model/quant_test.cpp compares Troupe's
# dequantize_row with, bit for bit (what the blocks are: scripts/reference/quant_fixtures.cpp).
# Builds llama.cpp first if needed (scripts/build-llama-cpp.sh), then compiles the generator
# against its libggml-base. The tests only read the committed files: they never need llama.cpp.
#
# Usage: scripts/make-quant-fixtures.sh
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
log() { echo "make-quant-fixtures: $*"; }

scripts/build-llama-cpp.sh
cache=".cache/llama.cpp"
src="$cache/src"
bin="$cache/build/bin"
out="tests/fixtures/quant"

tool="$cache/reference/quant_fixtures"
tool_src="scripts/reference/quant_fixtures.cpp"
if [ ! -x "$tool" ] || [ "$tool_src" -nt "$tool" ] || [ "$bin/libggml-base.so" -nt "$tool" ]; then
  log "compiling $tool_src"
  mkdir -p "$(dirname "$tool")"
  g++ -std=c++17 -O2 -Wall -Wextra -o "$tool" "$tool_src" \
    -I "$src/ggml/include" -L "$bin" -lggml-base -Wl,-rpath,"$root/$bin"
fi
mkdir -p "$out"
"$tool" "$out"
log "llama.cpp $(sed -n 's/^llama_cpp_commit=//p' "$cache/VERSION"); wrote $(du -sh "$out" | cut -f1) to $out"

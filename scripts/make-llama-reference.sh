#!/usr/bin/env bash
# Regenerates Troupe's committed llama.cpp reference data:
#   tests/fixtures/llama_reference/smollm2_greedy.{txt,json}
#       greedy decoding of SmolLM2-135M-Instruct (Q4_1) by llama.cpp: 26 prompts x 32 steps, with
#       the chosen token and the top-5 (id, raw logit) per step
#   tests/fixtures/tokenizer/ggml-vocab-smollm2.gguf{,.inp,.out}
#       SmolLM2's vocabulary (no tensors) and test vectors tokenized by llama.cpp
#   tests/fixtures/tokenizer/ggml-vocab-starcoder.gguf{,.inp,.out}
#       copied from llama.cpp's models/ folder (and checked with llama.cpp's test-tokenizer-0)
# Builds llama.cpp first if needed (scripts/build-llama-cpp.sh), then compiles and runs
# scripts/reference/llama_reference.cpp against it. The formats are described in
# tests/fixtures/llama_reference/README.md.
#
# Usage: scripts/make-llama-reference.sh [MODEL]   (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
# Environment:
#   OUT_DIR=DIR   write the greedy reference there instead (needed for a model other than the
#                 pinned SmolLM2 file; the tokenizer fixtures are then skipped)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
model="${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}"
model_sha_expected="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
fixtures="tests/fixtures/llama_reference"
out_dir="${OUT_DIR:-$fixtures}"
tok_dir="tests/fixtures/tokenizer"
n_steps=32
n_threads=2
# vendored vocabularies to copy (only those under 3 MB: llama-bpe and qwen2 are 7.8 and 5.9 MB)
vendored_vocabs=(starcoder)

log() { echo "make-llama-reference: $*"; }

[ -f "$model" ] || { log "no model at $model (run scripts/fetch-model.sh, or pass a path)"; exit 1; }

# 1. llama.cpp
scripts/build-llama-cpp.sh
cache=".cache/llama.cpp"
src="$cache/src"
bin="$cache/build/bin"
version_of() { sed -n "s/^$1=//p" "$cache/VERSION"; }
llama_cpp_python_version="$(version_of llama_cpp_python_version)"
llama_cpp_commit="$(version_of llama_cpp_commit)"
sdist_sha256="$(version_of sdist_sha256)"

# 2. the reference program
tool="$cache/reference/llama_reference"
tool_src="scripts/reference/llama_reference.cpp"
if [ ! -x "$tool" ] || [ "$tool_src" -nt "$tool" ] || [ "$bin/libllama.so" -nt "$tool" ]; then
  log "compiling $tool_src"
  mkdir -p "$(dirname "$tool")"
  g++ -std=c++17 -O2 -Wall -Wextra -o "$tool" "$tool_src" \
    -I "$src/include" -I "$src/ggml/include" \
    -L "$bin" -lllama -lggml -lggml-base -Wl,-rpath,"$root/$bin"
fi
sysinfo="$("$tool" info)"

# 3. the model
model_sha="$(sha256sum "$model" | cut -d' ' -f1)"
if [ "$model_sha" != "$model_sha_expected" ]; then
  if [ -z "${OUT_DIR:-}" ]; then
    log "$model has sha256 $model_sha, not the pinned SmolLM2 file ($model_sha_expected);"
    log "set OUT_DIR to write a reference for another model"
    exit 1
  fi
  log "note: $model is not the pinned SmolLM2 file"
fi

# 4. greedy reference
mkdir -p "$out_dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 scripts/reference/reference.py prompts "$tmp/prompts.txt"
log "greedy decoding, $n_steps steps, $n_threads threads, $(wc -l < "$tmp/prompts.txt") prompts"
start=$(date +%s)
"$tool" greedy "$model" "$tmp/prompts.txt" "$tmp/greedy.txt" "$n_steps" "$n_threads"
log "decoding took $(( $(date +%s) - start )) s"
{
  echo "# llama.cpp $llama_cpp_commit (vendored in llama-cpp-python $llama_cpp_python_version), model sha256 $model_sha"
  cat "$tmp/greedy.txt"
} > "$out_dir/smollm2_greedy.txt"
python3 scripts/reference/reference.py json "$out_dir/smollm2_greedy.txt" "$out_dir/smollm2_greedy.json" \
  "llama_cpp.commit=$llama_cpp_commit" \
  "llama_cpp.source=llama-cpp-python $llama_cpp_python_version sdist from PyPI, vendor/llama.cpp" \
  "llama_cpp.sdist_sha256=$sdist_sha256" \
  "llama_cpp.system_info=$sysinfo" \
  "model.file=$(basename "$model")" \
  "model.sha256=$model_sha"
log "wrote $out_dir/smollm2_greedy.txt ($(wc -c < "$out_dir/smollm2_greedy.txt") bytes)" \
    "and $out_dir/smollm2_greedy.json ($(wc -c < "$out_dir/smollm2_greedy.json") bytes)"

if [ -n "${OUT_DIR:-}" ]; then
  log "OUT_DIR set: skipping the tokenizer fixtures"
  exit 0
fi

# 5. tokenizer fixtures
voc="$tok_dir/ggml-vocab-smollm2.gguf"
"$tool" vocab-gguf "$model" "$voc"
install -m 0644 "$tok_dir/ggml-vocab-gpt-2.gguf.inp" "$voc.inp"
"$tool" tokenize-fixture "$voc" "$voc.inp" "$voc.out"
for v in "${vendored_vocabs[@]}"; do
  for ext in "" .inp .out; do
    install -m 0644 "$src/models/ggml-vocab-$v.gguf$ext" "$tok_dir/ggml-vocab-$v.gguf$ext"
  done
  # cross-check this tool's tokenize-fixture against llama.cpp's own vectors
  "$tool" tokenize-fixture "$tok_dir/ggml-vocab-$v.gguf" "$tok_dir/ggml-vocab-$v.gguf.inp" "$tmp/$v.out"
  cmp -s "$tmp/$v.out" "$tok_dir/ggml-vocab-$v.gguf.out" || { log "tokenize-fixture disagrees with llama.cpp's $v vectors"; exit 1; }
done
for v in smollm2 "${vendored_vocabs[@]}"; do
  if "$bin/test-tokenizer-0" "$tok_dir/ggml-vocab-$v.gguf" > "$tmp/tt0.log" 2>&1; then
    log "test-tokenizer-0 ok: ggml-vocab-$v.gguf ($(wc -c < "$tok_dir/ggml-vocab-$v.gguf") bytes)"
  else
    tail -20 "$tmp/tt0.log"; log "test-tokenizer-0 FAILED on ggml-vocab-$v.gguf"; exit 1
  fi
done
log "done"

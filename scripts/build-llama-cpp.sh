#!/usr/bin/env bash
# Builds llama.cpp, Troupe's correctness and speed reference, into .cache/llama.cpp/ (git-ignored).
# The source is the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI, pinned below
# (version and sha256). CPU only, Release, shared libraries, -DGGML_NATIVE=ON.
#
# Idempotent: downloads, unpacks, configures and builds only what is missing; when everything is
# already built it only prints where things are.
#
# Usage: scripts/build-llama-cpp.sh
# Environment:
#   LLAMA_CPP_SDIST=FILE  use this copy of the sdist instead of downloading it (sha256 is checked)
#   JOBS=N                parallel compile jobs (default 2)
#
# Layout afterwards (relative to the repository root):
#   .cache/llama.cpp/src/            llama.cpp source (vendor/llama.cpp of the sdist)
#   .cache/llama.cpp/build/bin/      llama-bench, llama-batched-bench, llama-cli, llama-completion,
#                                    llama-tokenize, test-tokenizer-0, libllama.so, libggml*.so
#   .cache/llama.cpp/src/include/    llama.h;  .cache/llama.cpp/src/ggml/include/  ggml*.h
#   .cache/llama.cpp/VERSION         llama-cpp-python version, llama.cpp commit, sdist sha256
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$root/.cache/llama.cpp"

lcp_py_version="0.3.36"
sdist_name="llama_cpp_python-$lcp_py_version.tar.gz"
sdist_sha="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# llama-cpp-python 0.3.36's CHANGELOG: "update llama.cpp to ggml-org/llama.cpp@0c1e57098".
# The sdist has no .git, so the commit is passed to CMake explicitly (llama-cli --version etc.).
llama_commit="0c1e57098"
jobs="${JOBS:-2}"

src="$cache/src"
build="$cache/build"
dl="$cache/dl"
targets=(llama llama-bench llama-batched-bench llama-cli llama-completion llama-tokenize test-tokenizer-0)
stamp="$cache/.built-$lcp_py_version-$llama_commit"

log() { echo "build-llama-cpp: $*"; }

print_where() {
  local rel="${build#"$root"/}"
  log "llama.cpp $llama_commit (from llama-cpp-python $lcp_py_version)"
  log "binaries:  $rel/bin/  (llama-bench, llama-batched-bench, llama-cli, llama-completion, llama-tokenize, test-tokenizer-0)"
  log "libraries: $rel/bin/libllama.so, $rel/bin/libggml*.so"
  log "headers:   ${src#"$root"/}/include/llama.h, ${src#"$root"/}/ggml/include/"
}

all_built() {
  [ -f "$stamp" ] || return 1
  local t
  for t in llama-bench llama-batched-bench llama-cli llama-completion llama-tokenize test-tokenizer-0; do
    [ -x "$build/bin/$t" ] || return 1
  done
  [ -f "$build/bin/libllama.so" ] || return 1
}

if all_built; then
  log "already built, nothing to do"
  print_where
  exit 0
fi

mkdir -p "$cache" "$dl"

# 1. The sdist.
sdist="$dl/$sdist_name"
check_sha() { echo "$sdist_sha  $1" | sha256sum -c --status; }
if [ -f "$sdist" ] && ! check_sha "$sdist"; then
  log "$sdist has a bad checksum; fetching it again"
  rm -f "$sdist"
fi
if [ ! -f "$sdist" ]; then
  if [ -n "${LLAMA_CPP_SDIST:-}" ]; then
    log "copying the sdist from $LLAMA_CPP_SDIST"
    cp "$LLAMA_CPP_SDIST" "$sdist.part"
  else
    log "downloading llama-cpp-python==$lcp_py_version sdist from PyPI (~77 MB)"
    tmp="$(mktemp -d)"
    python3 -m pip download --quiet --no-deps --no-binary :all: \
      "llama-cpp-python==$lcp_py_version" -d "$tmp"
    mv "$tmp/$sdist_name" "$sdist.part"
    rm -rf "$tmp"
  fi
  check_sha "$sdist.part" || { log "sha256 mismatch for $sdist_name (expected $sdist_sha)"; rm -f "$sdist.part"; exit 1; }
  mv "$sdist.part" "$sdist"
fi
log "sdist ok: ${sdist#"$root"/} (sha256 $sdist_sha)"

# 2. Unpack vendor/llama.cpp into src/.
if [ ! -f "$src/.unpacked-$lcp_py_version" ]; then
  log "unpacking vendor/llama.cpp"
  rm -rf "$src" "$cache/unpack"
  mkdir -p "$cache/unpack"
  tar -xzf "$sdist" -C "$cache/unpack" "llama_cpp_python-$lcp_py_version/vendor/llama.cpp"
  mv "$cache/unpack/llama_cpp_python-$lcp_py_version/vendor/llama.cpp" "$src"
  rm -rf "$cache/unpack"
  touch "$src/.unpacked-$lcp_py_version"
fi

# 3. Configure.
if [ ! -f "$build/build.ninja" ]; then
  log "configuring (CPU only, Release, shared libs, GGML_NATIVE=ON)"
  cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=ON \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_OPENCL=OFF -DGGML_BLAS=OFF \
    -DLLAMA_BUILD_COMMIT="$llama_commit" \
    -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    > "$cache/configure.log" 2>&1 || { tail -40 "$cache/configure.log"; log "configure failed (see ${cache#"$root"/}/configure.log)"; exit 1; }
fi

# 4. Build.
log "building ${targets[*]} with -j$jobs (about 20-40 min on 2 cores the first time)"
start=$(date +%s)
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
end=$(date +%s)
log "build finished in $((end - start)) s"

cat > "$cache/VERSION" <<EOF
llama_cpp_python_version=$lcp_py_version
llama_cpp_commit=$llama_commit
sdist_sha256=$sdist_sha
EOF
touch "$stamp"
print_where

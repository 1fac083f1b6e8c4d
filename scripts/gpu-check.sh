#!/usr/bin/env bash
# GPU check: builds only the engine (model/), the cuda backend (gpu/) and the check executable
# (gpu/check/CMakeLists.txt: no CAF, Boost, RocksDB, GTest or PCRE2), then runs it. The check
# generates synthetic Llama models (SmolLM2-135M shape, ~1B Llama shape), so no model file is
# needed, and reports cuda-vs-cpu parity and decode/prefill speed (see gpu/gpu_check.cpp).
#
#   scripts/gpu-check.sh                 build and run everything
#   scripts/gpu-check.sh --build-only    configure and build, do not run (works without a GPU)
#   scripts/gpu-check.sh --small-only    only the 135M shape (also --big-only, --parity-only)
#
# Environment: TROUPE_GPU_CHECK_BUILD (build folder, default build-gpu-check),
# TROUPE_CUDA_ARCHS (default 90), NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${TROUPE_GPU_CHECK_BUILD:-build-gpu-check}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
build_only=0
args=()
for a in "$@"; do
  if [[ $a == --build-only ]]; then build_only=1; else args+=("$a"); fi
done

start=$(date +%s)
cmake -S gpu/check -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DTROUPE_CUDA_ARCHS="${TROUPE_CUDA_ARCHS:-90}" >/dev/null
cmake --build "$build" --target troupe_gpu_check -j"$(nproc)"
echo "gpu-check: built in $(( $(date +%s) - start )) s"
[[ $build_only == 1 ]] && exit 0
"$build/troupe_gpu_check" "${args[@]}"

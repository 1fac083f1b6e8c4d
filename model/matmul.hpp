#pragma once
// Batched matrix multiplication against a (possibly quantized) weight matrix: the hot path of
// the CPU backend. Each weight row is read once per call for all tokens of the batch.
#include <cstddef>
#include <cstdint>

#include "model/ggml_type.hpp"
#include "model/thread_pool.hpp"

namespace troupe::model {

// A weight matrix as stored in GGUF: n_out rows, each of n_in elements of `type`, contiguous.
struct weight_view {
  ggml_type type = ggml_type::f32;
  const void* data = nullptr;
  int64_t n_in = 0;    // elements per row (ne[0])
  int64_t n_out = 0;   // rows (ne[1])
  size_t row_stride = 0;  // bytes between rows = row_bytes(type, n_in)
};

// Y[t * n_out + o] = sum_i X[t * n_in + i] * W[o][i], for t < n_tok.
// Activations are quantized to 8 bits per block where the weight type's fast path works that
// way (all block-quantized types); F32/F16/BF16 weights use float FMA.
void matmul(const weight_view& w, const float* x, int64_t n_tok, float* y, thread_pool& pool);

// matmul() for n matrices that read the same input (Q, K and V; gate and up): ys[i] receives
// ws[i]'s output. The activations are quantized once and all rows of all matrices are shared
// out in a single dispatch, which saves a hand-off and a quantization per extra matrix. Every
// ws[i].n_in must be equal.
void matmul_multi(const weight_view* ws, float* const* ys, int n, const float* x, int64_t n_tok,
                  thread_pool& pool);

// Same contract, scalar and unthreaded: the reference the tests compare against.
void matmul_reference(const weight_view& w, const float* x, int64_t n_tok, float* y);

// Which SIMD path `matmul` uses on this CPU ("avx512vnni", "avx2", "scalar"): the widest one the
// CPU supports, unless the environment variable TROUPE_MATMUL_ISA names a narrower supported one
// (read once, at the first matmul; for debugging and benchmarking the fallbacks).
const char* matmul_isa();

}  // namespace troupe::model

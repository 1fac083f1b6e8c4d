#pragma once
// Batched matrix multiplication against a (possibly quantized) weight matrix: the hot path of
// the CPU backend. Each weight row is read once per call for all tokens of the batch.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

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
  // The same matrix in the fast kernels' layout (see pack_weights), or null: when set, matmul
  // computes with it (fast order) instead of llama.cpp's order over `data`.
  const void* packed = nullptr;
};

// How a quantized matmul sums a row's block products:
// - llama_cpp: llama.cpp's CPU order (8 partial sums per row, each block's scaled and added),
//   bit for bit what llama.cpp computes, which keeps greedy outputs on llama.cpp's path;
// - fast: each block's whole integer dot product scaled once, over weights repacked 16 rows at
//   a time (AVX-512 VNNI, or AVX2 with the same results): about 2x the throughput, same
//   accuracy against the exact product, results differing from llama.cpp's in the last bits.
enum class matmul_order { llama_cpp, fast };
const char* matmul_order_name(matmul_order o);
// "llama.cpp" or "fast"; nullopt for anything else.
std::optional<matmul_order> parse_matmul_order(std::string_view name);

// A matrix's weights in the fast layout. Empty when this CPU or this type (Q4_0, Q4_1, Q8_0,
// Q4_K and Q6_K are packed) has no fast kernel; the caller then keeps computing in llama.cpp's order.
struct packed_weights {
  std::shared_ptr<uint8_t> bytes;
  explicit operator bool() const { return bytes != nullptr; }
};
packed_weights pack_weights(const weight_view& w);
// The same in parts, for a caller that lays several matrices out in one allocation: the bytes
// `w` packs into (a multiple of 64; 0 when it has no fast kernel), and the packing into `mem`
// (64-byte aligned, packed_bytes(w) long).
size_t packed_bytes(const weight_view& w);
void pack_weights_into(const weight_view& w, uint8_t* mem);

// Work on a chunk of output rows as soon as they are computed, by the thread that computed them
// and before the call returns (biases, RoPE and K/V stores, SwiGLU, residual adds): no second
// pass over the outputs and no hand-off of its own. fn(r0, r1) may read and write the outputs'
// rows [r0, r1) of every token, and nothing else of them; it runs inside the pool's job, so it
// must not use the pool. (A call of more than 8 matrices, not a hot path, runs it once over all
// rows on the calling thread.)
struct row_epilogue {
  // Rows of the matrices' outputs laid end to end; with shared_rows, rows of each matrix, a chunk
  // covering the same rows of all of them (gate and up; rows past a shorter matrix's end are
  // not computed for it).
  std::function<void(int64_t r0, int64_t r1)> fn;
  // Chunk boundaries fall on multiples of this (a head's rows for RoPE; at least 16).
  int64_t align = 16;
  bool shared_rows = false;
};

// Work that produces the input rows (the norm before Q/K/V and before gate/up): fn(t) writes token
// t's row of the matmul's x. It runs once per token, before any output row is computed. With
// block-quantized weights it runs in the activation quantization's hand-off (which reads the row
// right after), so the norm costs no dispatch of its own; with only F32/F16/BF16 weights it takes
// a pass of its own. Like an epilogue it must not use the pool. x's rows are ready when the call
// returns, even if no output row is computed.
struct row_prologue {
  std::function<void(int64_t t)> fn;
};

// The prologue if any, then Y[t * n_out + o] = sum_i X[t * n_in + i] * W[o][i] for t < n_tok,
// then the epilogue if any.
// Activations are quantized to 8 bits per block where the weight type's fast path works that
// way (all block-quantized types); F32/F16/BF16 weights use float FMA.
void matmul(const weight_view& w, const float* x, int64_t n_tok, float* y, thread_pool& pool,
            const row_epilogue* then = nullptr, const row_prologue* first = nullptr);

// matmul() for n matrices that read the same input (Q, K and V; gate and up): ys[i] receives
// ws[i]'s output. The activations are quantized once and all rows of all matrices are shared
// out in a single dispatch, which saves a hand-off and a quantization per extra matrix. Every
// ws[i].n_in must be equal.
void matmul_multi(const weight_view* ws, float* const* ys, int n, const float* x, int64_t n_tok,
                  thread_pool& pool, const row_epilogue* then = nullptr, const row_prologue* first = nullptr);

// Same contract, scalar and unthreaded: the reference the tests compare against.
void matmul_reference(const weight_view& w, const float* x, int64_t n_tok, float* y);

// Which SIMD path `matmul` uses on this CPU ("avx512vnni", "avx2", "scalar"): the widest one the
// CPU supports, unless the environment variable TROUPE_MATMUL_ISA names a narrower supported one
// (read once, at the first matmul; for debugging and benchmarking the fallbacks).
const char* matmul_isa();

// Whether the fast order's kernels run on this CPU (AVX2 or AVX-512 VNNI, and matmul_isa() not
// lowered to scalar). Without them a backend asked for the fast order keeps llama.cpp's.
bool fast_order_available();

}  // namespace troupe::model

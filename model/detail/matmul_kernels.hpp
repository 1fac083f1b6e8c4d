#pragma once
// Internal interface between matmul.cpp (dispatch, threading, scratch) and the per-ISA kernel
// files. Kernel files are compiled with wider -m flags than the rest of the engine, so this
// header holds only POD types and declarations: no inline code that a scalar caller could end
// up linking in an AVX-512 copy of.
#include <cstddef>
#include <cstdint>

namespace troupe::model {
class thread_pool;
struct weight_view;
struct row_epilogue;
struct row_prologue;
}  // namespace troupe::model

namespace troupe::model::detail {

enum class isa_kind { scalar = 0, avx2 = 1, avx512vnni = 2 };

// Activations quantized like ggml's Q8_0 (blocks of 32 int8 sharing one float scale) plus each
// block's sum, which the Q4_1 / Q4_K kernels need for their min term. Rows are zero-padded to
// an even number of blocks (64 bytes) so 512-bit kernels never branch on a lone last block on
// the activation side.
struct q8_acts {
  const int8_t* qs;  // token t: qs + t * qs_stride, nb_pad * 32 bytes
  const float* d;    // token t: d + t * nb_pad; block scales, 0 in the padding
  const float* s;    // token t: s + t * nb_pad; d * sum(qs) per block, 0 in the padding
  const int32_t* sum16;  // token t: sum16 + 2 * t * nb_pad; sum(qs[0..15]), sum(qs[16..31]) per block
  int64_t nb;        // real blocks of 32 per row
  int64_t nb_pad;    // nb rounded up to even
  int64_t qs_stride; // = nb_pad * 32
};

// The weight matrix as the kernels see it: row o starts at data + o * row_stride.
struct kernel_weights {
  const uint8_t* data;
  size_t row_stride;
  int64_t n_in;
};

// Computes y[t * y_stride + o] for rows o in [r0, r1) and tokens t in [t0, t1).
using q8_kernel_fn = void (*)(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1,
                              int64_t t0, int64_t t1, float* y, int64_t y_stride);
using float_kernel_fn = void (*)(const kernel_weights& w, const float* x, int64_t x_stride,
                                 int64_t r0, int64_t r1, int64_t t0, int64_t t1, float* y,
                                 int64_t y_stride);
// Quantizes one row of n floats (n a multiple of 32) into qs / d / s / sum16 as laid out in q8_acts.
using quantize_acts_fn = void (*)(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* sum16);

struct isa_kernels {
  q8_kernel_fn q4_0;
  q8_kernel_fn q4_1;
  q8_kernel_fn q8_0;
  q8_kernel_fn q4_k;
  q8_kernel_fn q6_k;
  float_kernel_fn f32;
  float_kernel_fn f16;
  float_kernel_fn bf16;
  quantize_acts_fn quantize_acts;  // nullptr: this ISA computes quantized types in float
};

// Each table is only valid on a CPU that supports its ISA (see isa_supported).
const isa_kernels& avx2_kernels();
const isa_kernels& avx512vnni_kernels();

// The "fast" layout (matmul_order::fast): a matrix's rows in groups of 16, each group its blocks
// in order, each block the 16 rows' quants interleaved 4 bytes at a time (32-bit word i of
// 64-byte chunk k holds row i's bytes 4k..4k+3 of qs: for Q4 the nibbles as stored, for Q8_0 the
// values plus 128) and then 16 fp16 scales (and, Q4_1, 16 fp16 mins). Q4_K is packed per
// sub-block of 32 like Q4_1 (element l in the low nibble of byte l, l + 16 in its high one) with
// 16 f32 scales d * sc and 16 f32 mins -dmin * m. Q6_K: per block of 32 the 6-bit values as bytes
// (0..63, like Q8_0's word interleave) and two sets of 16 f32 scales d * sc, for elements 0-15 and 16-31.
struct x16_layout {
  static constexpr int rows = 16;
  static constexpr int q4_0_block = 256 + 32;
  static constexpr int q4_1_block = 256 + 64;
  static constexpr int q8_0_block = 512 + 32;
  static constexpr int q4_k_block = 256 + 128;
  static constexpr int q6_k_block = 512 + 128;
};

// Kernels over that layout (kernel_weights.data: the packed matrix; row_stride: bytes per group
// of 16 rows); q8_acts.sum16 must be filled.
struct x16_kernels {
  q8_kernel_fn q4_0;
  q8_kernel_fn q4_1;
  q8_kernel_fn q8_0;
  q8_kernel_fn q4_k;
  q8_kernel_fn q6_k;
};
const x16_kernels& avx512vnni_x16_kernels();
// The same arithmetic on AVX2 + FMA + F16C (pmaddubsw / pmaddwd): bit for bit the same results.
const x16_kernels& avx2_x16_kernels();

bool isa_supported(isa_kind isa);
isa_kind best_isa();
const char* isa_name(isa_kind isa);

// matmul() with a chosen ISA instead of the best one; tests use it to cover every path the CPU
// supports. Falls back to scalar when `isa` is not supported here.
void matmul_with_isa(isa_kind isa, const weight_view& w, const float* x, int64_t n_tok, float* y,
                     thread_pool& pool);
void matmul_multi_with_isa(isa_kind isa, const weight_view* ws, float* const* ys, int n_mat,
                           const float* x, int64_t n_tok, thread_pool& pool, const row_epilogue* then = nullptr,
                           const row_prologue* first = nullptr);

// Scalar reference quantization of one activation row (what every SIMD quantize_acts matches,
// up to round-half-even versus round-half-away on exact ties).
void quantize_acts_scalar(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* sum16);

}  // namespace troupe::model::detail

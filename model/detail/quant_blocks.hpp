#pragma once
// Byte layouts of ggml's block-quantized types, exactly as GGUF files store them (the structs of
// ggml-common.h). Shared by the reference code in quant.cpp and the SIMD kernels, so this header
// holds plain structs and constants only: it is included by translation units built with
// AVX-512 flags, where any inline function could leak wider instructions into scalar callers.
#include <cstdint>

namespace troupe::model::detail {

constexpr int qk32 = 32;    // elements per block of Q4_0, Q4_1, Q8_0
constexpr int qk_k = 256;   // elements per super-block of the K-quants

// value = (q - 8) * d; qs[j] holds element j in its low nibble and element j + 16 in its high one.
struct block_q4_0 {
  uint16_t d;  // fp16
  uint8_t qs[qk32 / 2];
};

// value = q * d + m, same nibble order as Q4_0.
struct block_q4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[qk32 / 2];
};

// value = q * d.
struct block_q8_0 {
  uint16_t d;  // fp16
  int8_t qs[qk32];
};

// Eight sub-blocks of 32: value = d * sc[j] * q - dmin * m[j], with the 6-bit sc/m packed in
// `scales` (see get_scale_min_k4 in quant.cpp). qs is four 32-byte chunks; chunk c holds
// sub-block 2c in its low nibbles and sub-block 2c + 1 in its high nibbles.
struct block_q4_k {
  uint16_t d;     // fp16, scale of the 6-bit scales
  uint16_t dmin;  // fp16, scale of the 6-bit mins
  uint8_t scales[12];
  uint8_t qs[qk_k / 2];
};

// Sixteen groups of 16: value = d * scales[g] * (q - 32), q 6 bits split into 4 low bits (ql)
// and 2 high bits (qh). Per 128-element half: ql[l] low/high nibble -> elements l / l + 64,
// ql[l + 32] low/high nibble -> elements l + 32 / l + 96, and qh[l] bits 0-1, 2-3, 4-5, 6-7
// -> elements l, l + 32, l + 64, l + 96 (l < 32).
struct block_q6_k {
  uint8_t ql[qk_k / 2];
  uint8_t qh[qk_k / 4];
  int8_t scales[qk_k / 16];
  uint16_t d;  // fp16
};

// The types below have no matmul kernels: their matrices are converted to Q8_0 at load
// (llama_model), so only quant.cpp's dequantizers read them.

// value = (q - 16) * d with q 5 bits: the low 4 as Q4_0's nibbles, the 5th of element j in bit j
// of qh (read as a little-endian uint32).
struct block_q5_0 {
  uint16_t d;  // fp16
  uint8_t qh[4];
  uint8_t qs[qk32 / 2];
};

// value = q * d + m, q 5 bits as in Q5_0.
struct block_q5_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qh[4];
  uint8_t qs[qk32 / 2];
};

// Sixteen groups of 16: value = d * (sc & 15) * q - dmin * (sc >> 4), sc = scales[group], q 2 bits.
// Bits 2k..2k+1 of qs[32h + l] hold element 32k + l of 128-element half h (k < 4, l < 32).
struct block_q2_k {
  uint8_t scales[qk_k / 16];
  uint8_t qs[qk_k / 4];
  uint16_t d;     // fp16, scale of the 4-bit scales
  uint16_t dmin;  // fp16, scale of the 4-bit mins
};

// Sixteen groups of 16: value = d * (sc - 32) * (q - 4), sc 6 bits (packed in `scales`, see
// q3_k_scales in quant.cpp), q 3 bits: the low 2 in qs as Q2_K's, the 3rd in bit 4h + k of
// hmask[l] for element 32k + l of half h.
struct block_q3_k {
  uint8_t hmask[qk_k / 8];
  uint8_t qs[qk_k / 4];
  uint8_t scales[12];
  uint16_t d;  // fp16
};

// Q4_K with a 5th bit per element: that of element l of sub-block j in bit j of qh[l] (l < 32).
struct block_q5_k {
  uint16_t d;     // fp16, scale of the 6-bit scales
  uint16_t dmin;  // fp16, scale of the 6-bit mins
  uint8_t scales[12];
  uint8_t qh[qk_k / 8];
  uint8_t qs[qk_k / 2];
};

static_assert(sizeof(block_q4_0) == 18, "Q4_0 block must match ggml");
static_assert(sizeof(block_q4_1) == 20, "Q4_1 block must match ggml");
static_assert(sizeof(block_q8_0) == 34, "Q8_0 block must match ggml");
static_assert(sizeof(block_q4_k) == 144, "Q4_K block must match ggml");
static_assert(sizeof(block_q6_k) == 210, "Q6_K block must match ggml");
static_assert(sizeof(block_q5_0) == 22, "Q5_0 block must match ggml");
static_assert(sizeof(block_q5_1) == 24, "Q5_1 block must match ggml");
static_assert(sizeof(block_q2_k) == 84, "Q2_K block must match ggml");
static_assert(sizeof(block_q3_k) == 110, "Q3_K block must match ggml");
static_assert(sizeof(block_q5_k) == 176, "Q5_K block must match ggml");

}  // namespace troupe::model::detail

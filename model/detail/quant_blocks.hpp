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

static_assert(sizeof(block_q4_0) == 18, "Q4_0 block must match ggml");
static_assert(sizeof(block_q4_1) == 20, "Q4_1 block must match ggml");
static_assert(sizeof(block_q8_0) == 34, "Q8_0 block must match ggml");
static_assert(sizeof(block_q4_k) == 144, "Q4_K block must match ggml");
static_assert(sizeof(block_q6_k) == 210, "Q6_K block must match ggml");

}  // namespace troupe::model::detail

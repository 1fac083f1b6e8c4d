#pragma once
// Block formats of the supported tensor types (GGUF / ggml layouts), conversion to and from
// float, and the plain (scalar) reference used to check every SIMD kernel.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/ggml_type.hpp"

namespace troupe::model {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
inline float round_fp16(float f) { return fp16_to_fp32(fp32_to_fp16(f)); }

// Converts n elements (a multiple of the type's block size) of a row of `type` to float.
void dequantize_row(ggml_type type, const void* src, float* dst, int64_t n);

// Converts n floats into `type`'s blocks (reference quantizers, round-to-nearest; used by tests,
// synthetic models and activation quantization). dst must hold row_bytes(type, n).
void quantize_row(ggml_type type, const float* src, void* dst, int64_t n);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block, from its 12 scale bytes.
void q4_k_scale_min(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m);

// The 256 6-bit values (0..63; the value is (q - 32) * d * scales[i / 16]) of a Q6_K super-block.
void q6_k_values(const void* block, uint8_t (&q)[256]);

// Plain float reference dot product of a quantized row with a float vector.
float dot_reference(ggml_type type, const void* row, const float* x, int64_t n);

}  // namespace troupe::model

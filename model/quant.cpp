#include "model/quant.hpp"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "model/detail/quant_blocks.hpp"

namespace troupe::model {

using detail::block_q4_0;
using detail::block_q4_1;
using detail::block_q4_k;
using detail::block_q6_k;
using detail::block_q8_0;
using detail::qk32;
using detail::qk_k;

namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round half to even, as ggml's nearest_int does (default FP environment).
int nearest_int(float f) { return static_cast<int>(std::lrintf(f)); }

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block. Sub-blocks 0-3 keep
// theirs in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 keep their low
// 4 bits in the nibbles of bytes 8-11 and their top 2 bits in the spare top bits of bytes 0-7.
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Inverse of get_scale_min_k4 for all eight sub-blocks at once.
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = sc[j];
      q[j + 4] = m[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
      q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// ---- dequantization ---------------------------------------------------------------------

void dequant_q4_0(const block_q4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < qk32 / 2; ++j) {
      y[j] = static_cast<float>((b[i].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const block_q4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk32) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < qk32 / 2; ++j) {
      y[j] = static_cast<float>(b[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q8_0(const block_q8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < qk32; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequant_q4_k(const block_q4_k* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * c, b[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, min0 = dmin * m0;
      const float d1 = d * sc1, min1 = dmin * m1;
      for (int l = 0; l < 32; ++l) *y++ = d0 * static_cast<float>(q[l] & 0x0F) - min0;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] >> 4) - min1;
    }
  }
}

void dequant_q6_k(const block_q6_k* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int g = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * scale) * q, in ggml's order, so results match it bit for bit.
        y[l] = d * static_cast<float>(sc[g]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[g + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[g + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[g + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// ---- quantization -----------------------------------------------------------------------

// Same rule as ggml's quantize_row_q4_0_ref: the element of largest magnitude maps to -8
// exactly, so the grid uses its full asymmetric range [-8, 7].
void quant_q4_0(const float* x, block_q4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk32) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < qk32; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < qk32 / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quant_q4_1(const float* x, block_q4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk32) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < qk32; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    b[i].m = fp32_to_fp16(mn);
    for (int j = 0; j < qk32 / 2; ++j) {
      const int lo = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
      const int hi = std::min(15, static_cast<int>((x[j + 16] - mn) * id + 0.5f));
      b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quant_q8_0(const float* x, block_q8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk32) {
    float amax = 0.0f;
    for (int j = 0; j < qk32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < qk32; ++j) b[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// Round-to-nearest Q4_K: per sub-block an affine grid over [min(0, lo), hi], then the 8 scales
// and 8 mins quantized to 6 bits against the super-block's largest, and finally every element
// re-quantized against the scales as stored (so rounding of the scales is not compounded).
// ggml's reference searches for better grids; the layout is what must match, not the search.
void quant_q4_k(const float* x, block_q4_k* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    float scales[8], mins[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float lo = 0.0f, hi = -FLT_MAX;
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, xs[l]);
        hi = std::max(hi, xs[l]);
      }
      scales[j] = (hi - lo) / 15.0f;
      mins[j] = -lo;
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
      ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
      lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    }
    pack_scale_min_k4(ls, lm, b[i].scales);
    b[i].d = fp32_to_fp16(max_scale / 63.0f);
    b[i].dmin = fp32_to_fp16(max_min / 63.0f);

    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    uint8_t levels[qk_k];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, &sc, &m);
      const float dj = d * sc;
      const float mj = dmin * m;
      for (int l = 0; l < 32; ++l) {
        const int q = dj != 0.0f ? nearest_int((x[32 * j + l] + mj) / dj) : 0;
        levels[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, 15));
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        b[i].qs[32 * c + l] =
            static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
      }
    }
  }
}

// Round-to-nearest Q6_K: each group of 16 gets the scale that maps its largest-magnitude element
// to -32 (the grid is [-32, 31]); the 16 scales are quantized to int8 the same way against the
// largest one, then elements are re-quantized against the stored scales.
void quant_q6_k(const float* x, block_q6_k* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    float scales[16];
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * g + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      scales[g] = max / -32.0f;
      if (std::fabs(scales[g]) > amax_scale) {
        amax_scale = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    std::memset(b[i].scales, 0, sizeof b[i].scales);
    if (max_scale == 0.0f) {
      b[i].d = fp32_to_fp16(0.0f);
    } else {
      const float iscale = -128.0f / max_scale;
      for (int g = 0; g < 16; ++g) {
        b[i].scales[g] = static_cast<int8_t>(std::clamp(nearest_int(iscale * scales[g]), -128, 127));
      }
      b[i].d = fp32_to_fp16(1.0f / iscale);
    }
    const float d = fp16_to_fp32(b[i].d);
    uint8_t levels[qk_k];
    for (int g = 0; g < 16; ++g) {
      const float dg = d * b[i].scales[g];
      for (int l = 0; l < 16; ++l) {
        const int q = dg != 0.0f ? nearest_int(x[16 * g + l] / dg) : 0;
        levels[16 * g + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = b[i].ql;
    uint8_t* qh = b[i].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      const uint8_t* lv = levels + 128 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((lv[l] & 0x0F) | ((lv[l + 64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((lv[l + 32] & 0x0F) | ((lv[l + 96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((lv[l] >> 4) | ((lv[l + 32] >> 4) << 2) |
                                     ((lv[l + 64] >> 4) << 4) | ((lv[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

// ---- scalar conversions -------------------------------------------------------------------

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7F800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, like F16C's vcvtps2ph with the default rounding mode.
uint16_t fp32_to_fp16(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7FFFFFFFu;
  if (x >= 0x7F800000u) {  // inf or NaN (NaN stays quiet and keeps its top payload bits)
    return static_cast<uint16_t>(sign | 0x7C00 | (x > 0x7F800000u ? 0x200 | ((x >> 13) & 0x3FF) : 0));
  }
  if (x >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {
    // Below the smallest normal half: adding 0.5f puts the fp16 subnormal unit (2^-24) at the
    // float's last mantissa bit, so the FPU's own round-to-even does the rounding.
    const float a = bits_float(x) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(a) - 0x3F000000u));
  }
  const uint32_t odd = (x >> 13) & 1;
  x += 0xC8000FFFu + odd;  // rebias exponent (127 -> 15) and add the rounding bias
  return static_cast<uint16_t>(sign | (x >> 13));
}

float bf16_to_fp32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

// ---- rows -------------------------------------------------------------------------------

void dequantize_row(ggml_type type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case ggml_type::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case ggml_type::f16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case ggml_type::bf16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case ggml_type::q4_0:
      return dequant_q4_0(static_cast<const block_q4_0*>(src), dst, n / qk32);
    case ggml_type::q4_1:
      return dequant_q4_1(static_cast<const block_q4_1*>(src), dst, n / qk32);
    case ggml_type::q8_0:
      return dequant_q8_0(static_cast<const block_q8_0*>(src), dst, n / qk32);
    case ggml_type::q4_k:
      return dequant_q4_k(static_cast<const block_q4_k*>(src), dst, n / qk_k);
    case ggml_type::q6_k:
      return dequant_q6_k(static_cast<const block_q6_k*>(src), dst, n / qk_k);
    default:
      // Callers check traits_of(type)->supported before computing with a tensor.
      assert(false && "dequantize_row: unsupported type");
      std::fill(dst, dst + n, 0.0f);
  }
}

void quantize_row(ggml_type type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case ggml_type::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case ggml_type::f16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case ggml_type::bf16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case ggml_type::q4_0:
      return quant_q4_0(src, static_cast<block_q4_0*>(dst), n / qk32);
    case ggml_type::q4_1:
      return quant_q4_1(src, static_cast<block_q4_1*>(dst), n / qk32);
    case ggml_type::q8_0:
      return quant_q8_0(src, static_cast<block_q8_0*>(dst), n / qk32);
    case ggml_type::q4_k:
      return quant_q4_k(src, static_cast<block_q4_k*>(dst), n / qk_k);
    case ggml_type::q6_k:
      return quant_q6_k(src, static_cast<block_q6_k*>(dst), n / qk_k);
    default:
      assert(false && "quantize_row: unsupported type");
  }
}

void q4_k_scale_min(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m) { get_scale_min_k4(j, scales, sc, m); }

void q6_k_values(const void* block, uint8_t (&q)[256]) {
  const auto* b = static_cast<const block_q6_k*>(block);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b->ql + 64 * half;
    const uint8_t* qh = b->qh + 32 * half;
    uint8_t* y = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      y[l] = static_cast<uint8_t>((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4));
      y[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      y[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      y[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

float dot_reference(ggml_type type, const void* row, const float* x, int64_t n) {
  // Dequantize in chunks (every supported block size divides 256) so that no heap allocation
  // is needed; accumulate in double so the reference itself adds no visible rounding error.
  constexpr int64_t chunk = qk_k;
  const size_t chunk_bytes = row_bytes(type, chunk);
  const auto* src = static_cast<const uint8_t*>(row);
  float buf[chunk];
  double sum = 0.0;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    dequantize_row(type, src, buf, len);
    for (int64_t j = 0; j < len; ++j) sum += static_cast<double>(buf[j]) * x[i + j];
    src += chunk_bytes;
  }
  return static_cast<float>(sum);
}

}  // namespace troupe::model

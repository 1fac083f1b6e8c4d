#include "model/quant.hpp"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "model/detail/quant_blocks.hpp"

namespace troupe::model {

using detail::block_q2_k;
using detail::block_q3_k;
using detail::block_q4_0;
using detail::block_q4_1;
using detail::block_q4_k;
using detail::block_q5_0;
using detail::block_q5_1;
using detail::block_q5_k;
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

// The sixteen 6-bit scales of a Q3_K super-block, less 32 (so in [-32, 31]). Scale j keeps its
// low 4 bits in byte j % 8 (low nibble for j < 8, high nibble after) and its top 2 bits in
// bits 2 (j / 4) of byte 8 + j % 4.
void unpack_q3_k_scales(const uint8_t* q, int (&sc)[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (q[j] & 0x0F) : (q[j - 8] >> 4);
    const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = (lo | (hi << 4)) - 32;
  }
}

// Inverse of unpack_q3_k_scales; sc[j] in [-32, 31].
void pack_q3_k_scales(const int (&sc)[16], uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;
    q[j % 8] |= static_cast<uint8_t>((v & 0x0F) << (j < 8 ? 0 : 4));
    q[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
  }
}

// The fifth bits of a Q5_0 / Q5_1 block: bit j is that of element j.
uint32_t load_qh(const uint8_t (&qh)[4]) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}

void store_qh(uint32_t v, uint8_t (&qh)[4]) {
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(v >> (8 * k));
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

// The dequantizers below compute each value with the operations of ggml's dequantize_row_*, in
// the same order, so that they match it bit for bit (tests/fixtures/quant/).
void dequant_q5_0(const block_q5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk32) {
    const float d = fp16_to_fp32(b[i].d);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < qk32 / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequant_q5_1(const block_q5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk32) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    const uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < qk32 / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
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

void dequant_q2_k(const block_q2_k* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    const uint8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b[i].qs + 32 * half;
      for (int k = 0; k < 4; ++k) {
        for (int part = 0; part < 2; ++part, ++sc) {  // two groups of 16 per 32 bytes of qs
          const float dl = d * static_cast<float>(*sc & 0x0F);
          const float ml = dmin * static_cast<float>(*sc >> 4);
          for (int l = 16 * part; l < 16 * part + 16; ++l)
            *y++ = dl * static_cast<float>((q[l] >> (2 * k)) & 3) - ml;
        }
      }
    }
  }
}

void dequant_q3_k(const block_q3_k* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    int sc[16];
    unpack_q3_k_scales(b[i].scales, sc);
    int g = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b[i].qs + 32 * half;
      for (int k = 0; k < 4; ++k) {
        const int hbit = 4 * half + k;
        for (int part = 0; part < 2; ++part, ++g) {
          const float dl = d * static_cast<float>(sc[g]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int low = (q[l] >> (2 * k)) & 3;
            const int v = low - (((b[i].hmask[l] >> hbit) & 1) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequant_q5_k(const block_q5_k* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float dmin = fp16_to_fp32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    const uint8_t* qh = b[i].qh;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * c, b[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * c + 1, b[i].scales, &sc1, &m1);
      const float d0 = d * sc0, min0 = dmin * m0;
      const float d1 = d * sc1, min1 = dmin * m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d0 * static_cast<float>((q[l] & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4)) - min0;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - min1;
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

// The element of largest magnitude, with its sign (the first of equals), as ggml's reference
// quantizers pick it.
float largest_magnitude(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float& mn, float& mx) {
  mn = FLT_MAX;
  mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
}

// Same rule as ggml's quantize_row_q4_0_ref: the element of largest magnitude maps to -8
// exactly, so the grid uses its full asymmetric range [-8, 7].
void quant_q4_0(const float* x, block_q4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk32) {
    const float max = largest_magnitude(x, qk32);
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
    float mn, mx;
    min_max(x, qk32, mn, mx);
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

// 32 five-bit codes (code(j) for j < 32) as Q5_0 / Q5_1 store them: low nibbles of j and j + 16
// in qs[j], the fifth bits in qh.
template <class Code>
void pack_5bit(Code code, uint8_t* qs, uint8_t (&qh_out)[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < qk32 / 2; ++j) {
    const int lo = code(j), hi = code(j + 16);
    qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  store_qh(qh, qh_out);
}

// Same rule as ggml's quantize_row_q5_0_ref: Q4_0's, on the grid [-16, 15].
void quant_q5_0(const float* x, block_q5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk32) {
    const float max = largest_magnitude(x, qk32);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    pack_5bit([&](int j) { return std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))); }, b[i].qs,
              b[i].qh);
  }
}

// Same rule as ggml's quantize_row_q5_1_ref: Q4_1's, on 32 levels.
void quant_q5_1(const float* x, block_q5_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += qk32) {
    float mn, mx;
    min_max(x, qk32, mn, mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    b[i].m = fp32_to_fp16(mn);
    pack_5bit([&](int j) { return std::min(31, static_cast<int>((x[j] - mn) * id + 0.5f)); }, b[i].qs, b[i].qh);
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

// A super-block on an affine grid, round to nearest: value = d * sc[g] * q - dmin * m[g], over
// n_groups groups of 256 / n_groups elements, q in [0, q_max], sc and m in [0, scale_max]. Each
// group gets the grid over [min(0, lo), hi]; its scale and min are quantized against the
// super-block's largest, and every element is then re-quantized against the scales as stored
// (so rounding of the scales is not compounded). ggml's reference quantizers search for better
// grids; the layout is what must match, not the search. Used by Q2_K, Q4_K and Q5_K.
struct affine_super_block {
  uint16_t d = 0, dmin = 0;  // fp16
  uint8_t sc[16] = {}, m[16] = {};
  uint8_t q[qk_k] = {};
};

void quantize_affine_super_block(const float* x, int n_groups, int q_max, int scale_max, affine_super_block& out) {
  const int gs = qk_k / n_groups;
  float scales[16], mins[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int g = 0; g < n_groups; ++g) {
    const float* xs = x + gs * g;
    float lo = 0.0f, hi = -FLT_MAX;
    for (int l = 0; l < gs; ++l) {
      lo = std::min(lo, xs[l]);
      hi = std::max(hi, xs[l]);
    }
    scales[g] = (hi - lo) / static_cast<float>(q_max);
    mins[g] = -lo;
    max_scale = std::max(max_scale, scales[g]);
    max_min = std::max(max_min, mins[g]);
  }
  const auto smax = static_cast<float>(scale_max);
  const float inv_scale = max_scale > 0.0f ? smax / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? smax / max_min : 0.0f;
  for (int g = 0; g < n_groups; ++g) {
    out.sc[g] = static_cast<uint8_t>(std::min(scale_max, nearest_int(inv_scale * scales[g])));
    out.m[g] = static_cast<uint8_t>(std::min(scale_max, nearest_int(inv_min * mins[g])));
  }
  out.d = fp32_to_fp16(max_scale / smax);
  out.dmin = fp32_to_fp16(max_min / smax);
  const float d = fp16_to_fp32(out.d);
  const float dmin = fp16_to_fp32(out.dmin);
  for (int g = 0; g < n_groups; ++g) {
    const float dg = d * out.sc[g];
    const float mg = dmin * out.m[g];
    for (int l = 0; l < gs; ++l) {
      const int q = dg != 0.0f ? nearest_int((x[gs * g + l] + mg) / dg) : 0;
      out.q[gs * g + l] = static_cast<uint8_t>(std::clamp(q, 0, q_max));
    }
  }
}

// A super-block of sixteen groups of 16 on a symmetric grid, round to nearest: value =
// d * sc[g] * q, q in [-q_neg, q_neg - 1], sc in [-scale_neg, scale_neg - 1]. Each group gets
// the scale that maps its largest-magnitude element to -q_neg (the grid's longer end); the 16
// scales are quantized the same way against the largest one, then elements are re-quantized
// against the stored scales. Used by Q3_K and Q6_K.
struct symmetric_super_block {
  uint16_t d = 0;  // fp16
  int sc[16] = {};
  int q[qk_k] = {};
};

void quantize_symmetric_super_block(const float* x, int q_neg, int scale_neg, symmetric_super_block& out) {
  float scales[16];
  float max_scale = 0.0f, amax_scale = 0.0f;
  for (int g = 0; g < 16; ++g) {
    const float max = largest_magnitude(x + 16 * g, 16);
    scales[g] = max / -static_cast<float>(q_neg);
    if (std::fabs(scales[g]) > amax_scale) {
      amax_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  if (max_scale == 0.0f) {
    out = symmetric_super_block{};
    out.d = fp32_to_fp16(0.0f);
  } else {
    const float iscale = -static_cast<float>(scale_neg) / max_scale;
    for (int g = 0; g < 16; ++g) out.sc[g] = std::clamp(nearest_int(iscale * scales[g]), -scale_neg, scale_neg - 1);
    out.d = fp32_to_fp16(1.0f / iscale);
  }
  const float d = fp16_to_fp32(out.d);
  for (int g = 0; g < 16; ++g) {
    const float dg = d * static_cast<float>(out.sc[g]);
    for (int l = 0; l < 16; ++l) {
      const int q = dg != 0.0f ? nearest_int(x[16 * g + l] / dg) : 0;
      out.q[16 * g + l] = std::clamp(q, -q_neg, q_neg - 1);
    }
  }
}

void quant_q4_k(const float* x, block_q4_k* b, int64_t nb) {
  affine_super_block s;
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    quantize_affine_super_block(x, 8, 15, 63, s);
    pack_scale_min_k4(s.sc, s.m, b[i].scales);
    b[i].d = s.d;
    b[i].dmin = s.dmin;
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(s.q[64 * c + l] | (s.q[64 * c + 32 + l] << 4));
    }
  }
}

void quant_q5_k(const float* x, block_q5_k* b, int64_t nb) {
  affine_super_block s;
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    quantize_affine_super_block(x, 8, 31, 63, s);
    pack_scale_min_k4(s.sc, s.m, b[i].scales);
    b[i].d = s.d;
    b[i].dmin = s.dmin;
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = s.q[64 * c + l], hi = s.q[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

// Q2_K and Q3_K store the low 2 bits of element 32k + l of half h in bits 2k of qs[32h + l].
void pack_2bit_k(const uint8_t (&low2)[qk_k], uint8_t* qs) {
  std::memset(qs, 0, qk_k / 4);
  for (int i = 0; i < qk_k; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    qs[32 * h + l] |= static_cast<uint8_t>((low2[i] & 3) << (2 * k));
  }
}

void quant_q2_k(const float* x, block_q2_k* b, int64_t nb) {
  affine_super_block s;
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    quantize_affine_super_block(x, 16, 3, 15, s);
    for (int g = 0; g < 16; ++g) b[i].scales[g] = static_cast<uint8_t>(s.sc[g] | (s.m[g] << 4));
    b[i].d = s.d;
    b[i].dmin = s.dmin;
    pack_2bit_k(s.q, b[i].qs);
  }
}

void quant_q3_k(const float* x, block_q3_k* b, int64_t nb) {
  symmetric_super_block s;
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    quantize_symmetric_super_block(x, 4, 32, s);
    pack_q3_k_scales(s.sc, b[i].scales);
    b[i].d = s.d;
    uint8_t levels[qk_k];
    std::memset(b[i].hmask, 0, sizeof b[i].hmask);
    for (int j = 0; j < qk_k; ++j) {
      levels[j] = static_cast<uint8_t>(s.q[j] + 4);  // 0..7; the 3rd bit goes to hmask
      const int h = j / 128, k = (j % 128) / 32, l = j % 32;
      b[i].hmask[l] |= static_cast<uint8_t>((levels[j] >> 2) << (4 * h + k));
    }
    pack_2bit_k(levels, b[i].qs);
  }
}

void quant_q6_k(const float* x, block_q6_k* b, int64_t nb) {
  symmetric_super_block s;
  for (int64_t i = 0; i < nb; ++i, x += qk_k) {
    quantize_symmetric_super_block(x, 32, 128, s);
    for (int g = 0; g < 16; ++g) b[i].scales[g] = static_cast<int8_t>(s.sc[g]);
    b[i].d = s.d;
    uint8_t levels[qk_k];
    for (int j = 0; j < qk_k; ++j) levels[j] = static_cast<uint8_t>(s.q[j] + 32);
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
    case ggml_type::q5_0:
      return dequant_q5_0(static_cast<const block_q5_0*>(src), dst, n / qk32);
    case ggml_type::q5_1:
      return dequant_q5_1(static_cast<const block_q5_1*>(src), dst, n / qk32);
    case ggml_type::q2_k:
      return dequant_q2_k(static_cast<const block_q2_k*>(src), dst, n / qk_k);
    case ggml_type::q3_k:
      return dequant_q3_k(static_cast<const block_q3_k*>(src), dst, n / qk_k);
    case ggml_type::q5_k:
      return dequant_q5_k(static_cast<const block_q5_k*>(src), dst, n / qk_k);
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
    case ggml_type::q5_0:
      return quant_q5_0(src, static_cast<block_q5_0*>(dst), n / qk32);
    case ggml_type::q5_1:
      return quant_q5_1(src, static_cast<block_q5_1*>(dst), n / qk32);
    case ggml_type::q2_k:
      return quant_q2_k(src, static_cast<block_q2_k*>(dst), n / qk_k);
    case ggml_type::q3_k:
      return quant_q3_k(src, static_cast<block_q3_k*>(dst), n / qk_k);
    case ggml_type::q5_k:
      return quant_q5_k(src, static_cast<block_q5_k*>(dst), n / qk_k);
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

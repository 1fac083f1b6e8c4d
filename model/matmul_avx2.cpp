// AVX2 + FMA + F16C kernels: the baseline x86-64 path. Built with per-file -mavx2 flags (see
// the top-level CMakeLists.txt); the same rules as matmul_avx512.cpp apply (anonymous
// namespace, no inline code from library headers).
//
// Same scheme as the AVX-512 kernels, one block of 32 per step: pmaddubsw (u8 x s8 -> pairs of
// s16) then pmaddwd by ones (-> s32 per 4 elements) replaces vpdpbusd. pmaddubsw saturates at
// 16 bits, which is safe for unsigned weights up to 63 (Q4_*, Q6_K: 63 * 127 * 2 < 32767) but
// not for Q8_0 with a +128 offset, so Q8_0 uses the sign trick instead: |w| x (x * sign(w)).
#include <immintrin.h>

#include <cstdint>

#include "model/detail/matmul_kernels.hpp"
#include "model/detail/quant_blocks.hpp"

namespace troupe::model::detail {

namespace {

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// fp32 -> fp16 -> fp32 with F16C, bit-identical to quant.hpp's round_fp16 (round to nearest
// even), which this file must not call: it is inline, and its copy from here could be the one
// the linker keeps for scalar callers.
inline float round_through_fp16(float f) { return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 1, 1)));
  return _mm_cvtsi128_si32(s);
}

// 16 bytes of Q4_0 / Q4_1 nibbles -> 32 bytes in element order.
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// ---- per-type weight loaders (one block of 32 per step) ----------------------------------

struct q4_0_ops {
  static constexpr int kOffset = 8;
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = false;
  static constexpr int kUnitBlocks = 1;
  struct state {
    const uint8_t* p;
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float*) {
    st.p = row + u * sizeof(block_q4_0);
  }
  static void load(const state& st, int, __m256i& q, __m256i&, __m256& s) {
    q = unpack_nibbles(st.p + 2);
    s = _mm256_set1_ps(half_to_float(load_u16(st.p)));
  }
};

struct q4_1_ops {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kSigned = false;
  static constexpr int kUnitBlocks = 1;
  struct state {
    const uint8_t* p;
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float* corr) {
    st.p = row + u * sizeof(block_q4_1);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(st.p))));
    corr[u] = _mm_cvtss_f32(_mm_movehdup_ps(f));
  }
  static void load(const state& st, int, __m256i& q, __m256i&, __m256& s) {
    q = unpack_nibbles(st.p + 4);
    s = _mm256_set1_ps(half_to_float(load_u16(st.p)));
  }
};

struct q8_0_ops {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = true;
  static constexpr int kUnitBlocks = 1;
  struct state {
    const uint8_t* p;
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float*) {
    st.p = row + u * sizeof(block_q8_0);
  }
  static void load(const state& st, int, __m256i& q, __m256i& sgn, __m256& s) {
    sgn = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.p + 2));
    q = _mm256_abs_epi8(sgn);
    s = _mm256_set1_ps(half_to_float(load_u16(st.p)));
  }
};

struct q4_k_ops {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kSigned = false;
  static constexpr int kUnitBlocks = 8;
  struct state {
    const uint8_t* qs;
    float sc[8];
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float* corr) {
    const auto* b = reinterpret_cast<const block_q4_k*>(row) + u;
    const uint32_t w0 = load_u32(b->scales), w1 = load_u32(b->scales + 4),
                   w2 = load_u32(b->scales + 8);
    const uint32_t sc_lo = w0 & 0x3F3F3F3Fu;
    const uint32_t m_lo = w1 & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
    const __m128i sc8 = _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo));
    const __m128i m8 = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(reinterpret_cast<const uint8_t*>(b)))));
    const __m256 d = _mm256_broadcastss_ps(dd);
    const __m256 dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
    _mm256_storeu_ps(st.sc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc8))));
    const __m256 mf = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)));
    _mm256_storeu_ps(corr + 8 * u, _mm256_sub_ps(_mm256_setzero_ps(), mf));
    st.qs = b->qs;
  }
  static void load(const state& st, int k, __m256i& q, __m256i&, __m256& s) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.qs + 32 * (k >> 1)));
    if (k & 1) v = _mm256_srli_epi16(v, 4);
    q = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
    s = _mm256_set1_ps(st.sc[k]);
  }
};

struct q6_k_ops {
  static constexpr int kOffset = 32;
  static constexpr bool kHasMin = false;
  static constexpr bool kSigned = false;
  static constexpr int kUnitBlocks = 8;
  struct state {
    const block_q6_k* b;
    float sc[16];
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float*) {
    st.b = reinterpret_cast<const block_q6_k*>(row) + u;
    const __m256 d = _mm256_set1_ps(half_to_float(load_u16(reinterpret_cast<const uint8_t*>(&st.b->d))));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(st.b->scales));
    _mm256_storeu_ps(st.sc, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(st.sc + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc)))));
  }
  // Step k: elements 32k .. 32k + 31 = part (k & 3) of half (k >> 2).
  static void load(const state& st, int k, __m256i& q, __m256i&, __m256& s) {
    const int half = k >> 2, part = k & 3;
    __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.b->ql + 64 * half + 32 * (part & 1)));
    if (part >= 2) lo = _mm256_srli_epi16(lo, 4);
    __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.b->qh + 32 * half));
    switch (part) {
      case 0: hi = _mm256_slli_epi16(hi, 4); break;
      case 1: hi = _mm256_slli_epi16(hi, 2); break;
      case 2: break;
      default: hi = _mm256_srli_epi16(hi, 2); break;
    }
    q = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0x0F)),
                        _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
    s = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(st.sc[2 * k])),
                             _mm_set1_ps(st.sc[2 * k + 1]), 1);
  }
};

// ---- the tile driver --------------------------------------------------------------------

template <class Ops, int R, int T>
inline void accumulate(const __m256i (&q)[R], const __m256i (&sgn)[R], const __m256 (&s)[R],
                       const int8_t* const (&xq)[T], const float* const (&xd)[T], int64_t blk,
                       __m256 (&acc)[R][T]) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xq[t] + 32 * blk));
    const __m256 dv = _mm256_set1_ps(xd[t][blk]);
    __m256i off = _mm256_setzero_si256();
    if constexpr (Ops::kOffset != 0) {
      off = _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(Ops::kOffset)), xv);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256i p16;
      if constexpr (Ops::kSigned) {
        p16 = _mm256_maddubs_epi16(q[r], _mm256_sign_epi8(xv, sgn[r]));
      } else {
        p16 = _mm256_maddubs_epi16(q[r], xv);
      }
      if constexpr (Ops::kOffset != 0) p16 = _mm256_sub_epi16(p16, off);
      const __m256i p32 = _mm256_madd_epi16(p16, ones);
      acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_mul_ps(s[r], dv), acc[r][t]);
    }
  }
}

// The min terms as llama.cpp adds them: block after block, each product rounded, then added
// (the file is ISO C++: no contraction into an FMA). With the 8-lane FMA chain above and hsum's
// order this is ggml_vec_dot_q4_1_q8_1's arithmetic, bit for bit.
inline float sum_mins(const float* m, const float* s, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum = sum + m[i] * s[i];
  return sum;
}

inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float sum = hsum(acc);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

template <class Ops, int R, int T>
void q8_tile(const kernel_weights& w, const q8_acts& x, int64_t r, int64_t t, float* y,
             int64_t y_stride, float* corr) {
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = w.data + (r + i) * w.row_stride;
  const int8_t* xq[T];
  const float* xd[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.qs_stride;
    xd[j] = x.d + (t + j) * x.nb_pad;
  }
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();

  const int64_t n_units = x.nb / Ops::kUnitBlocks;
  for (int64_t u = 0; u < n_units; ++u) {
    typename Ops::state st[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) Ops::begin_unit(st[i], rows[i], u, corr + i * x.nb_pad);
#pragma GCC unroll 8
    for (int k = 0; k < Ops::kUnitBlocks; ++k) {
      __m256i q[R], sgn[R];
      __m256 s[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) Ops::load(st[i], k, q[i], sgn[i], s[i]);
      accumulate<Ops, R, T>(q, sgn, s, xq, xd, u * Ops::kUnitBlocks + k, acc);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      float v = hsum(acc[i][j]);
      if constexpr (Ops::kHasMin) v += sum_mins(corr + i * x.nb_pad, x.s + (t + j) * x.nb_pad, x.nb);
      y[(t + j) * y_stride + r + i] = v;
    }
  }
}

// 16 ymm registers: a single token keeps 4 rows in flight; batches use 2 rows x 4 tokens.
template <class Ops, int R, int T>
void q8_rows(const kernel_weights& w, const q8_acts& x, int64_t r, int64_t t0, int64_t t1,
             float* y, int64_t y_stride, float* corr) {
  int64_t t = t0;
  for (; t + T <= t1; t += T) q8_tile<Ops, R, T>(w, x, r, t, y, y_stride, corr);
  switch (t1 - t) {
    case 1: q8_tile<Ops, R, 1>(w, x, r, t, y, y_stride, corr); break;
    case 2: q8_tile<Ops, R, 2>(w, x, r, t, y, y_stride, corr); break;
    case 3: q8_tile<Ops, R, 3>(w, x, r, t, y, y_stride, corr); break;
    default: break;
  }
}

template <class Ops>
void q8_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0,
               int64_t t1, float* y, int64_t y_stride) {
  // Per-block min terms of one row tile (at most 4 rows): K / 8 bytes on the stack.
  float* corr = static_cast<float*>(__builtin_alloca(sizeof(float) * 4 * x.nb_pad));
  int64_t r = r0;
  if (t1 - t0 == 1) {
    for (; r + 4 <= r1; r += 4) q8_rows<Ops, 4, 1>(w, x, r, t0, t1, y, y_stride, corr);
  } else {
    for (; r + 2 <= r1; r += 2) q8_rows<Ops, 2, 4>(w, x, r, t0, t1, y, y_stride, corr);
  }
  for (; r < r1; ++r) q8_rows<Ops, 1, 4>(w, x, r, t0, t1, y, y_stride, corr);
}

// ---- float weights ----------------------------------------------------------------------

struct f32_load {
  static __m256 load(const uint8_t* p, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + i); }
  static float one(const uint8_t* p, int64_t i) { return reinterpret_cast<const float*>(p)[i]; }
};
struct f16_load {
  static __m256 load(const uint8_t* p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i)));
  }
  static float one(const uint8_t* p, int64_t i) { return half_to_float(load_u16(p + 2 * i)); }
};
struct bf16_load {
  static __m256 load(const uint8_t* p, int64_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float one(const uint8_t* p, int64_t i) {
    const uint32_t u = static_cast<uint32_t>(load_u16(p + 2 * i)) << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
  }
};

template <class L, int R, int T>
void float_tile(const kernel_weights& w, const float* x, int64_t x_stride, int64_t r, int64_t t,
                float* y, int64_t y_stride) {
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = w.data + (r + i) * w.row_stride;
  const float* xs[T];
  for (int j = 0; j < T; ++j) xs[j] = x + (t + j) * x_stride;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t n = w.n_in;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = L::load(rows[i], k);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m256 xv = _mm256_loadu_ps(xs[j] + k);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      float v = hsum(acc[i][j]);
      for (int64_t kk = k; kk < n; ++kk) v += L::one(rows[i], kk) * xs[j][kk];
      y[(t + j) * y_stride + r + i] = v;
    }
  }
}

template <class L, int R>
void float_rows(const kernel_weights& w, const float* x, int64_t x_stride, int64_t r, int64_t t0,
                int64_t t1, float* y, int64_t y_stride) {
  int64_t t = t0;
  for (; t + 2 <= t1; t += 2) float_tile<L, R, 2>(w, x, x_stride, r, t, y, y_stride);
  if (t < t1) float_tile<L, R, 1>(w, x, x_stride, r, t, y, y_stride);
}

template <class L>
void float_kernel(const kernel_weights& w, const float* x, int64_t x_stride, int64_t r0,
                  int64_t r1, int64_t t0, int64_t t1, float* y, int64_t y_stride) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) float_rows<L, 4>(w, x, x_stride, r, t0, t1, y, y_stride);
  for (; r < r1; ++r) float_rows<L, 1>(w, x, x_stride, r, t0, t1, y, y_stride);
}

// ---- activation quantization ------------------------------------------------------------

void quantize_acts(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* sum16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / qk32; ++b, x += qk32, qs += qk32) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    __m256 a = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1]));
    a = _mm256_max_ps(a, _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    const float db = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i iv[4];
    for (int i = 0; i < 4; ++i) iv[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    // packs work within 128-bit lanes; the permute restores element order.
    const __m256i p01 = _mm256_packs_epi32(iv[0], iv[1]);
    const __m256i p23 = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), p);
    // Scales rounded through fp16 as ggml's block_q8_0 / block_q8_1 store them: the products
    // then match llama.cpp's bit for bit, which keeps greedy decoding on the same path.
    d[b] = round_through_fp16(db);
    sum16[2 * b] = hsum_epi32(_mm256_add_epi32(iv[0], iv[1]));
    sum16[2 * b + 1] = hsum_epi32(_mm256_add_epi32(iv[2], iv[3]));
    s[b] = round_through_fp16(db * static_cast<float>(sum16[2 * b] + sum16[2 * b + 1]));
  }
}

}  // namespace

const isa_kernels& avx2_kernels() {
  static const isa_kernels k = {
      q8_kernel<q4_0_ops>,     q8_kernel<q4_1_ops>,     q8_kernel<q8_0_ops>,
      q8_kernel<q4_k_ops>,     q8_kernel<q6_k_ops>,     float_kernel<f32_load>,
      float_kernel<f16_load>,  float_kernel<bf16_load>, quantize_acts,
  };
  return k;
}

}  // namespace troupe::model::detail

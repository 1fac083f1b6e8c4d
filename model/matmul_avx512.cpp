// AVX-512 VNNI kernels (Zen 4, Ice Lake and later). Built with per-file -mavx512* flags (see
// the top-level CMakeLists.txt) and only ever called after best_isa() / isa_supported() said so.
// Everything here sits in an anonymous namespace and uses no inline code from library headers,
// so no AVX-512 copy of a shared inline function can be picked by the linker for scalar callers.
//
// How a block-quantized dot product is computed: activations arrive quantized to int8 blocks
// of 32 (q8_acts). Each loop step takes 64 weights (two blocks of 32, or part of a K-quant
// super-block) unpacked to unsigned bytes in element order, and uses vpdpbusd (u8 x s8 -> s32,
// four products per lane) against the 64 activation bytes. Each of the 16 int32 lanes covers 4
// consecutive elements, so any scale granularity of 4 or more elements becomes a per-lane float
// vector: acc += float(lane) * (weight scale * activation scale).
// Signed weight grids (Q4_0, Q8_0, Q6_K) are stored with an offset (q + 8, q ^ 0x80, q + 32);
// the offset times the activation sum is subtracted in the integer accumulator's start value,
// computed once per token and block pair. Q4_1 / Q4_K mins are added at the end of a row as a
// short dot product of per-block min terms with the per-block activation sums.
// For batches, a row tile is unpacked once into an L1-resident buffer and reused by every token
// tile (packed_tile); a single token streams the rows directly (q8_tile_single).

// GCC 12's AVX-512 intrinsic headers trip its own -Wuninitialized on the `__Y = __Y` idiom
// they use for "undefined" vectors (GCC bug 105593, fixed in 13); the pragma must precede the
// include because the warnings point into the header.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "model/detail/avx512_lanes.hpp"
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

// [a x 8, b x 8]
inline __m512 two_scales(float a, float b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

// Two fp16 values (low and high half of `pair`) -> [a x 8, b x 8].
inline __m512 two_fp16_scales(uint32_t pair) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(pair)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(f));
}

// Two Q4_0 / Q4_1 nibble arrays (16 bytes each) -> 64 bytes in element order.
inline __m512i unpack_nibbles_pair(const uint8_t* qa, const uint8_t* qb) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa)));
  v = _mm512_mask_broadcast_i32x4(v, 0xFF00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)));
  v = _mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
  return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}

// ---- K-quant weight loaders --------------------------------------------------------------
// (Q4_0, Q4_1 and Q8_0 have their own kernels in llama.cpp's order, below.)
// A loader walks one weight row in "units" (kUnitBlocks blocks of 32, kPairsPerUnit steps of
// 64 elements). begin_unit() reads whatever the unit shares (K-quant super-block scales) and
// writes the unit's per-block min terms into `corr`; load() yields one 64-element step.

// Q4_K: 8 sub-blocks of 32 with 6-bit scales/mins; step k covers sub-blocks 2k and 2k + 1,
// which are the low and high nibbles of the same 32 bytes.
struct q4_k_ops {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr int kUnitBlocks = 8;
  static constexpr int kPairsPerUnit = 4;
  struct state {
    const uint8_t* qs;
    __m512 scales;  // d * sc[j] in lanes 0..7
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float* corr) {
    const auto* b = reinterpret_cast<const block_q4_k*>(row) + u;
    // Unpack the twelve bytes of 6-bit scales/mins four at a time (see get_scale_min_k4).
    const uint32_t w0 = load_u32(b->scales), w1 = load_u32(b->scales + 4),
                   w2 = load_u32(b->scales + 8);
    const uint32_t sc_lo = w0 & 0x3F3F3F3Fu;
    const uint32_t m_lo = w1 & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | (((w1 >> 6) & 0x03030303u) << 4);
    const __m128i sc8 = _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo));
    const __m128i m8 = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(row + u * sizeof(block_q4_k)))));
    const __m256 d = _mm256_broadcastss_ps(dd);
    const __m256 dmin = _mm256_broadcastss_ps(_mm_shuffle_ps(dd, dd, _MM_SHUFFLE(1, 1, 1, 1)));
    const __m256 scf = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc8)));
    const __m256 mf = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)));
    _mm256_storeu_ps(corr + 8 * u, _mm256_sub_ps(_mm256_setzero_ps(), mf));
    st.scales = _mm512_castps256_ps512(scf);
    st.qs = b->qs;
  }
  static void load(const state& st, int k, __m512i& q, __m512& s) {
    __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.qs + 32 * k)));
    v = _mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0));
    q = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
    const __m512i idx = _mm512_add_epi32(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                         _mm512_set1_epi32(2 * k));
    s = _mm512_permutexvar_ps(idx, st.scales);
  }
};

// Q6_K: 16 groups of 16 with int8 scales; step k covers elements 64k .. 64k + 63, i.e. the
// low (k even) or high (k odd) nibbles of 64 ql bytes plus two 2-bit fields of 32 qh bytes.
struct q6_k_ops {
  static constexpr int kOffset = 32;
  static constexpr bool kHasMin = false;
  static constexpr int kUnitBlocks = 8;
  static constexpr int kPairsPerUnit = 4;
  struct state {
    const block_q6_k* b;
    __m512 scales;  // d * scales[g], g = 0..15
  };
  static void begin_unit(state& st, const uint8_t* row, int64_t u, float*) {
    st.b = reinterpret_cast<const block_q6_k*>(row) + u;
    const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(load_u16(reinterpret_cast<const uint8_t*>(&st.b->d)))));
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(st.b->scales)));
    st.scales = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sc));
  }
  static void load(const state& st, int k, __m512i& q, __m512& s) {
    const int half = k >> 1;
    const __m512i lq = _mm512_loadu_si512(st.b->ql + 64 * half);
    const __m512i hq = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st.b->qh + 32 * half)));
    __m512i lo, hi;
    if ((k & 1) == 0) {
      lo = lq;
      hi = _mm512_sllv_epi64(hq, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4));
    } else {
      lo = _mm512_srli_epi16(lq, 4);
      hi = _mm512_srlv_epi64(hq, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0));
    }
    q = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi8(0x0F)),
                        _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
    const __m512i idx = _mm512_add_epi32(
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_set1_epi32(4 * k));
    s = _mm512_permutexvar_ps(idx, st.scales);
  }
};

// ---- the tile driver --------------------------------------------------------------------

// One 64-element step for an R x T tile.
template <int kOffset, int R, int T>
inline void accumulate(const __m512i (&q)[R], const __m512 (&s)[R], const int8_t* const (&xq)[T],
                       const float* const (&xd)[T], int64_t pair, __m512 (&acc)[R][T]) {
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512i xv = _mm512_load_si512(xq[t] + 64 * pair);
    const __m512 dv = two_scales(xd[t][2 * pair], xd[t][2 * pair + 1]);
    __m512i base = _mm512_setzero_si512();
    if constexpr (kOffset != 0) {
      base = _mm512_sub_epi32(
          base, _mm512_dpbusd_epi32(base, _mm512_set1_epi8(static_cast<char>(kOffset)), xv));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i dot = _mm512_dpbusd_epi32(base, q[r], xv);
      acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(s[r], dv), acc[r][t]);
    }
  }
}

inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Rows of a tile, and the activation rows of tokens [t, t + T).
template <int R, int T>
struct tile_ptrs {
  const uint8_t* rows[R];
  const int8_t* xq[T];
  const float* xd[T];
  tile_ptrs(const kernel_weights& w, const q8_acts& x, int64_t r, int64_t t) {
    for (int i = 0; i < R; ++i) rows[i] = w.data + (r + i) * w.row_stride;
    for (int j = 0; j < T; ++j) {
      xq[j] = x.qs + (t + j) * x.qs_stride;
      xd[j] = x.d + (t + j) * x.nb_pad;
    }
  }
};

// Horizontal sums plus, for types with a min term, the per-block mins times activation sums.
template <bool kHasMin, int R, int T>
inline void store_tile(const __m512 (&acc)[R][T], const q8_acts& x, int64_t r, int64_t t,
                       const float* corr, float* y, int64_t y_stride) {
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      float v = _mm512_reduce_add_ps(acc[i][j]);
      if constexpr (kHasMin) v += dot_f32(corr + i * x.nb_pad, x.s + (t + j) * x.nb_pad, x.nb_pad);
      y[(t + j) * y_stride + r + i] = v;
    }
  }
}

// Walks R rows step by step, handing each step's unpacked weights and scales to `step`.
template <class Ops, int R, class Step>
inline void for_each_step(const uint8_t* const (&rows)[R], const q8_acts& x, float* corr, Step&& step) {
  const int64_t n_units = x.nb / Ops::kUnitBlocks;
  for (int64_t u = 0; u < n_units; ++u) {
    typename Ops::state st[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) Ops::begin_unit(st[i], rows[i], u, corr + i * x.nb_pad);
#pragma GCC unroll 4
    for (int k = 0; k < Ops::kPairsPerUnit; ++k) {
      __m512i q[R];
      __m512 s[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) Ops::load(st[i], k, q[i], s[i]);
      step(u * Ops::kPairsPerUnit + k, q, s);
    }
  }
}

// Fused tile: unpacks the weights while computing; best when few tokens share them.
template <class Ops, int R, int T>
void q8_tile(const kernel_weights& w, const q8_acts& x, int64_t r, int64_t t, float* y,
             int64_t y_stride, float* corr) {
  const tile_ptrs<R, T> p(w, x, r, t);
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  for_each_step<Ops, R>(p.rows, x, corr, [&](int64_t pair, const __m512i (&q)[R], const __m512 (&s)[R]) {
    accumulate<Ops::kOffset, R, T>(q, s, p.xq, p.xd, pair, acc);
  });
  store_tile<Ops::kHasMin, R, T>(acc, x, r, t, corr, y, y_stride);
}

// Fused tile for one token (decode): the same steps, written out with one accumulator per row
// so that GCC keeps them in registers (with the R x T array it also stores them every step).
template <class Ops, int R>
void q8_tile_single(const kernel_weights& w, const q8_acts& x, int64_t r, int64_t t, float* y,
                    int64_t y_stride, float* corr) {
  const tile_ptrs<R, 1> p(w, x, r, t);
  const int8_t* xq = p.xq[0];
  const float* xd = p.xd[0];
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  auto step = [&](int64_t pair, const __m512i (&q)[R], const __m512 (&s)[R]) {
    const __m512i xv = _mm512_load_si512(xq + 64 * pair);
    const __m512 dv = two_scales(xd[2 * pair], xd[2 * pair + 1]);
    __m512i base = _mm512_setzero_si512();
    if constexpr (Ops::kOffset != 0) {
      base = _mm512_sub_epi32(
          base, _mm512_dpbusd_epi32(base, _mm512_set1_epi8(static_cast<char>(Ops::kOffset)), xv));
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i dot = _mm512_dpbusd_epi32(base, q[i], xv);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(s[i], dv), acc[i]);
    }
  };
  for_each_step<Ops, R>(p.rows, x, corr, step);
  for (int i = 0; i < R; ++i) {
    float v = _mm512_reduce_add_ps(acc[i]);
    if constexpr (Ops::kHasMin) v += dot_f32(corr + i * x.nb_pad, x.s + t * x.nb_pad, x.nb_pad);
    y[t * y_stride + r + i] = v;
  }
}

// Batches: the R rows are unpacked once into `packed` (per step: R weight vectors then R scale
// vectors, 128 * R bytes, L1-resident for typical rows) and every token tile reuses them, so
// the unpacking cost no longer scales with the number of tokens.
template <class Ops, int R>
void unpack_rows(const uint8_t* const (&rows)[R], const q8_acts& x, float* corr, __m512i* packed) {
  for_each_step<Ops, R>(rows, x, corr, [&](int64_t pair, const __m512i (&q)[R], const __m512 (&s)[R]) {
    __m512i* dst = packed + pair * 2 * R;
    for (int i = 0; i < R; ++i) {
      _mm512_store_si512(dst + i, q[i]);
      _mm512_store_si512(dst + R + i, _mm512_castps_si512(s[i]));
    }
  });
}

template <class Ops, int R, int T>
void packed_tile(const __m512i* packed, const q8_acts& x, int64_t r, int64_t t, float* y,
                 int64_t y_stride, const float* corr) {
  const int8_t* xq[T];
  const float* xd[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.qs_stride;
    xd[j] = x.d + (t + j) * x.nb_pad;
  }
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t n_pairs = x.nb_pad / 2;
  for (int64_t pair = 0; pair < n_pairs; ++pair) {
    const __m512i* src = packed + pair * 2 * R;
    __m512i q[R];
    __m512 s[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      q[i] = _mm512_load_si512(src + i);
      s[i] = _mm512_castsi512_ps(_mm512_load_si512(src + R + i));
    }
    accumulate<Ops::kOffset, R, T>(q, s, xq, xd, pair, acc);
  }
  store_tile<Ops::kHasMin, R, T>(acc, x, r, t, corr, y, y_stride);
}

// Row tiles of 4 sharing each activation load, token tiles of 4 sharing each unpacked weight
// step: 16 accumulators + 4 weights + 4 scales stay in the 32 zmm registers.
constexpr int k_rows = 4;
// Rows per tile for a single token (decode). 8 would share each activation load more widely but
// spills (8 weights + 8 scales + 8 accumulators); decode is bound by DRAM anyway.
constexpr int k_rows_single = 4;
constexpr int k_toks = 4;
// From this many tokens on, rows are unpacked once per call instead of once per token tile.
constexpr int64_t k_packed_min_tokens = 2 * k_toks;

template <class Ops, int R>
void q8_rows(const kernel_weights& w, const q8_acts& x, int64_t r, int64_t t0, int64_t t1,
             float* y, int64_t y_stride, float* corr, __m512i* packed) {
  int64_t t = t0;
  if (packed && t1 - t0 >= k_packed_min_tokens) {
    const tile_ptrs<R, 1> p(w, x, r, t0);
    unpack_rows<Ops, R>(p.rows, x, corr, packed);
    for (; t + k_toks <= t1; t += k_toks) packed_tile<Ops, R, k_toks>(packed, x, r, t, y, y_stride, corr);
    switch (t1 - t) {
      case 1: packed_tile<Ops, R, 1>(packed, x, r, t, y, y_stride, corr); break;
      case 2: packed_tile<Ops, R, 2>(packed, x, r, t, y, y_stride, corr); break;
      case 3: packed_tile<Ops, R, 3>(packed, x, r, t, y, y_stride, corr); break;
      default: break;
    }
    return;
  }
  for (; t + k_toks <= t1; t += k_toks) q8_tile<Ops, R, k_toks>(w, x, r, t, y, y_stride, corr);
  switch (t1 - t) {
    case 1: q8_tile<Ops, R, 1>(w, x, r, t, y, y_stride, corr); break;
    case 2: q8_tile<Ops, R, 2>(w, x, r, t, y, y_stride, corr); break;
    case 3: q8_tile<Ops, R, 3>(w, x, r, t, y, y_stride, corr); break;
    default: break;
  }
}

// Largest unpacked row tile kept on the stack (K = 16384 at 4 rows); wider rows use the fused
// tiles only.
constexpr size_t k_max_packed_bytes = 256 * 1024;

template <class Ops>
void q8_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0,
               int64_t t1, float* y, int64_t y_stride) {
  // Per-block min terms of the rows of one tile: k_rows * nb_pad floats, K / 8 bytes, so the
  // stack is the cheapest place for them.
  float* corr = static_cast<float*>(__builtin_alloca(sizeof(float) * k_rows_single * x.nb_pad));
  __m512i* packed = nullptr;
  const size_t packed_bytes = static_cast<size_t>(x.nb_pad / 2) * 2 * k_rows * sizeof(__m512i);
  if (t1 - t0 >= k_packed_min_tokens && packed_bytes <= k_max_packed_bytes) {
    auto addr = reinterpret_cast<uintptr_t>(__builtin_alloca(packed_bytes + 64));
    packed = reinterpret_cast<__m512i*>((addr + 63) & ~uintptr_t{63});
  }
  int64_t r = r0;
  if (t1 - t0 == 1) {
    for (; r + k_rows_single <= r1; r += k_rows_single) q8_tile_single<Ops, k_rows_single>(w, x, r, t0, y, y_stride, corr);
    for (; r < r1; ++r) q8_tile_single<Ops, 1>(w, x, r, t0, y, y_stride, corr);
    return;
  }
  for (; r + k_rows <= r1; r += k_rows) q8_rows<Ops, k_rows>(w, x, r, t0, t1, y, y_stride, corr, packed);
  for (; r < r1; ++r) q8_rows<Ops, 1>(w, x, r, t0, t1, y, y_stride, corr, packed);
}

// ---- float weights ----------------------------------------------------------------------

struct f32_load {
  static __m512 load(const uint8_t* p, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + i); }
  static __m512 load_masked(const uint8_t* p, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p) + i);
  }
};
struct f16_load {
  static __m512 load(const uint8_t* p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i)));
  }
  static __m512 load_masked(const uint8_t* p, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * i));
  }
};
struct bf16_load {
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint8_t* p, int64_t i) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i)));
  }
  static __m512 load_masked(const uint8_t* p, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, p + 2 * i));
  }
};

template <class L, int R, int T>
void float_tile(const kernel_weights& w, const float* x, int64_t x_stride, int64_t r, int64_t t,
                float* y, int64_t y_stride) {
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = w.data + (r + i) * w.row_stride;
  const float* xs[T];
  for (int j = 0; j < T; ++j) xs[j] = x + (t + j) * x_stride;
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t n = w.n_in;
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) wv[i] = L::load(rows[i], k);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const __m512 xv = _mm512_loadu_ps(xs[j] + k);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (k < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
    __m512 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = L::load_masked(rows[i], k, m);
    for (int j = 0; j < T; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xs[j] + k);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t + j) * y_stride + r + i] = _mm512_reduce_add_ps(acc[i][j]);
}

template <class L, int R>
void float_rows(const kernel_weights& w, const float* x, int64_t x_stride, int64_t r, int64_t t0,
                int64_t t1, float* y, int64_t y_stride) {
  int64_t t = t0;
  for (; t + k_toks <= t1; t += k_toks) float_tile<L, R, k_toks>(w, x, x_stride, r, t, y, y_stride);
  switch (t1 - t) {
    case 1: float_tile<L, R, 1>(w, x, x_stride, r, t, y, y_stride); break;
    case 2: float_tile<L, R, 2>(w, x, x_stride, r, t, y, y_stride); break;
    case 3: float_tile<L, R, 3>(w, x, x_stride, r, t, y, y_stride); break;
    default: break;
  }
}

// ---- 32-element block types (Q4_0, Q4_1, Q8_0) in ggml's order -----------------------------
// llama.cpp's dot product for these types (ggml_vec_dot_q4_1_q8_1 and friends) keeps 8 float
// lanes per row, lane l holding elements 4l..4l+3 of a block, and adds block after block in row
// order: acc = fma(d_w * d_x, float(lane), acc); Q4_1's min terms go to a scalar, block by
// block (m * s, then +); the result is the 8-lane sum ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)) plus
// the mins. The integer lane sums are the same here (vpdpbusd sums the same four products), so
// following that float order gives llama.cpp's matmul results bit for bit, and with them its
// greedy choices at near-ties (see tests/model/llama_reference_real_model_test.cpp).
// A 512-bit vector holds block b of two rows (lanes 0-7 row a, 8-15 row b); the activation block
// is broadcast to both halves. The file is compiled as ISO C++ (-ffp-contract=off), so the
// separate multiply and add below stay separate.

struct q4_0_pair {
  static constexpr int kOffset = 8;
  static constexpr bool kHasMin = false;
  static void load2(const uint8_t* ra, const uint8_t* rb, int64_t blk, __m512i& q, __m512& s, __m128&) {
    const uint8_t* a = ra + blk * sizeof(block_q4_0);
    const uint8_t* b = rb + blk * sizeof(block_q4_0);
    q = unpack_nibbles_pair(a + 2, b + 2);
    s = two_fp16_scales(load_u16(a) | (static_cast<uint32_t>(load_u16(b)) << 16));
  }
};

struct q4_1_pair {
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  // dm: [dA, mA, dB, mB]; mins_of() gathers the m's of four pairs.
  static void load2(const uint8_t* ra, const uint8_t* rb, int64_t blk, __m512i& q, __m512& s, __m128& dm) {
    const uint8_t* a = ra + blk * sizeof(block_q4_1);
    const uint8_t* b = rb + blk * sizeof(block_q4_1);
    q = unpack_nibbles_pair(a + 4, b + 4);
    // [dA, mA, dB, mB] in one conversion.
    const __m128i h = _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(load_u32(a))),
                                       static_cast<int>(load_u32(b)), 1);
    dm = _mm_cvtph_ps(h);
    s = _mm512_permutexvar_ps(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
                              _mm512_castps128_ps512(dm));
  }
};

struct q8_0_pair {
  static constexpr int kOffset = 128;
  static constexpr bool kHasMin = false;
  static void load2(const uint8_t* ra, const uint8_t* rb, int64_t blk, __m512i& q, __m512& s, __m128&) {
    const uint8_t* a = ra + blk * sizeof(block_q8_0);
    const uint8_t* b = rb + blk * sizeof(block_q8_0);
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
    const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    q = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qa), qb, 1),
                         _mm512_set1_epi8(static_cast<char>(0x80)));
    s = two_fp16_scales(load_u16(a) | (static_cast<uint32_t>(load_u16(b)) << 16));
  }
};

// ggml's 8-lane sum.
inline float sum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// The mins [mA0, mB0, mA1, mB1, ...] of up to four row pairs' [dA, mA, dB, mB], in registers.
template <int RP>
inline __m256 mins_of(const __m128 (&dm)[RP]) {
  const __m128 lo = _mm_shuffle_ps(dm[0], dm[RP > 1 ? 1 : 0], _MM_SHUFFLE(3, 1, 3, 1));
  if constexpr (RP <= 2) return _mm256_castps128_ps256(lo);
  const __m128 hi = _mm_shuffle_ps(dm[2], dm[RP > 3 ? 3 : 2], _MM_SHUFFLE(3, 1, 3, 1));
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

// Row pairs per tile: 4 (8 rows); tokens per tile: 4. 16 accumulators + 4 weight + 4 scale
// vectors fit the 32 zmm registers.
constexpr int k_pairs = 4;
constexpr int k_pair_toks = 4;
constexpr int k_pairs_single = 1;  // decode: 2 rows per tile (measured best: 4 and 8 rows in flight are slower)

// One block of RP row pairs (already loaded) against T tokens.
template <class Ops, int RP, int T>
inline void block_step(const __m512i (&q)[RP], const __m512 (&s)[RP], __m256 mins, const int8_t* const (&xq)[T],
                       const float* const (&xd)[T], const float* const (&xs)[T], int64_t blk,
                       __m512 (&acc)[RP][T], __m256 (&summs)[T]) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const __m512i xv = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(xq[t] + 32 * blk)));
    const __m512 dv = _mm512_set1_ps(xd[t][blk]);
    __m512i base = _mm512_setzero_si512();
    if constexpr (Ops::kOffset != 0)
      base = _mm512_sub_epi32(base, _mm512_dpbusd_epi32(base, _mm512_set1_epi8(static_cast<char>(Ops::kOffset)), xv));
#pragma GCC unroll 4
    for (int p = 0; p < RP; ++p) {
      const __m512i dot = _mm512_dpbusd_epi32(base, q[p], xv);
      acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(s[p], dv), _mm512_cvtepi32_ps(dot), acc[p][t]);
    }
    if constexpr (Ops::kHasMin)
      summs[t] = _mm256_add_ps(summs[t], _mm256_mul_ps(mins, _mm256_set1_ps(xs[t][blk])));
  }
}

template <class Ops, int RP, int T>
inline void store_pairs(const __m512 (&acc)[RP][T], const __m256 (&summs)[T], int n_rows, int64_t r, int64_t t,
                        float* y, int64_t y_stride) {
  for (int j = 0; j < T; ++j) {
    alignas(32) float m[8];
    _mm256_store_ps(m, summs[j]);
    for (int p = 0; p < RP; ++p) {
      const float lo = sum8(_mm512_castps512_ps256(acc[p][j]));
      const float hi = sum8(_mm512_extractf32x8_ps(acc[p][j], 1));
      float* out = y + (t + j) * y_stride + r + 2 * p;
      if (2 * p < n_rows) out[0] = Ops::kHasMin ? lo + m[2 * p] : lo;
      if (2 * p + 1 < n_rows) out[1] = Ops::kHasMin ? hi + m[2 * p + 1] : hi;
    }
  }
}

// Up to 2 * RP rows from r (a missing second row of the last pair repeats the first) against
// tokens [t, t + T), unpacking the weights as it goes (few tokens).
template <class Ops, int RP, int T>
void pair_tile(const kernel_weights& w, const q8_acts& x, int64_t r, int n_rows, int64_t t, float* y,
               int64_t y_stride) {
  const uint8_t* rows[2 * RP];
  for (int i = 0; i < 2 * RP; ++i) rows[i] = w.data + (r + (i < n_rows ? i : n_rows - 1)) * w.row_stride;
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.qs_stride;
    xd[j] = x.d + (t + j) * x.nb_pad;
    xs[j] = x.s + (t + j) * x.nb_pad;
  }
  __m512 acc[RP][T];
  __m256 summs[T];
  for (int j = 0; j < T; ++j) {
    summs[j] = _mm256_setzero_ps();
    for (int p = 0; p < RP; ++p) acc[p][j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < x.nb; ++b) {
    __m512i q[RP];
    __m512 s[RP];
    __m128 dm[RP];
#pragma GCC unroll 4
    for (int p = 0; p < RP; ++p) Ops::load2(rows[2 * p], rows[2 * p + 1], b, q[p], s[p], dm[p]);
    block_step<Ops, RP, T>(q, s, Ops::kHasMin ? mins_of<RP>(dm) : _mm256_setzero_ps(), xq, xd, xs, b, acc, summs);
  }
  store_pairs<Ops, RP, T>(acc, summs, n_rows, r, t, y, y_stride);
}

// Many tokens: the row tile's blocks are unpacked once (weights, scales, mins: an L1-resident
// buffer) and every token tile reuses them.
template <class Ops, int RP>
void unpack_pairs(const uint8_t* const (&rows)[2 * RP], int64_t nb, __m512i* packed) {
  for (int64_t b = 0; b < nb; ++b) {
    __m512i* dst = packed + b * (2 * RP + 1);
    __m128 dm[RP];
    for (int p = 0; p < RP; ++p) {
      __m512i q;
      __m512 s;
      Ops::load2(rows[2 * p], rows[2 * p + 1], b, q, s, dm[p]);
      _mm512_store_si512(dst + p, q);
      _mm512_store_si512(dst + RP + p, _mm512_castps_si512(s));
    }
    const __m256 mins = Ops::kHasMin ? mins_of<RP>(dm) : _mm256_setzero_ps();
    _mm512_store_si512(dst + 2 * RP, _mm512_castps_si512(_mm512_castps256_ps512(mins)));
  }
}

template <class Ops, int RP, int T>
void packed_pair_tile(const __m512i* packed, const q8_acts& x, int n_rows, int64_t r, int64_t t, float* y,
                      int64_t y_stride) {
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.qs_stride;
    xd[j] = x.d + (t + j) * x.nb_pad;
    xs[j] = x.s + (t + j) * x.nb_pad;
  }
  __m512 acc[RP][T];
  __m256 summs[T];
  for (int j = 0; j < T; ++j) {
    summs[j] = _mm256_setzero_ps();
    for (int p = 0; p < RP; ++p) acc[p][j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < x.nb; ++b) {
    const __m512i* src = packed + b * (2 * RP + 1);
    __m512i q[RP];
    __m512 s[RP];
#pragma GCC unroll 4
    for (int p = 0; p < RP; ++p) {
      q[p] = _mm512_load_si512(src + p);
      s[p] = _mm512_castsi512_ps(_mm512_load_si512(src + RP + p));
    }
    block_step<Ops, RP, T>(q, s, _mm512_castps512_ps256(_mm512_castsi512_ps(_mm512_load_si512(src + 2 * RP))), xq, xd, xs, b,
                           acc, summs);
  }
  store_pairs<Ops, RP, T>(acc, summs, n_rows, r, t, y, y_stride);
}

template <class Ops, int RP>
void pair_rows(const kernel_weights& w, const q8_acts& x, int64_t r, int n_rows, int64_t t0, int64_t t1, float* y,
               int64_t y_stride, __m512i* packed) {
  int64_t t = t0;
  if (packed) {
    const uint8_t* rows[2 * RP];
    for (int i = 0; i < 2 * RP; ++i) rows[i] = w.data + (r + (i < n_rows ? i : n_rows - 1)) * w.row_stride;
    unpack_pairs<Ops, RP>(rows, x.nb, packed);
    for (; t + k_pair_toks <= t1; t += k_pair_toks) packed_pair_tile<Ops, RP, k_pair_toks>(packed, x, n_rows, r, t, y, y_stride);
    switch (t1 - t) {
      case 1: packed_pair_tile<Ops, RP, 1>(packed, x, n_rows, r, t, y, y_stride); break;
      case 2: packed_pair_tile<Ops, RP, 2>(packed, x, n_rows, r, t, y, y_stride); break;
      case 3: packed_pair_tile<Ops, RP, 3>(packed, x, n_rows, r, t, y, y_stride); break;
      default: break;
    }
    return;
  }
  for (; t + k_pair_toks <= t1; t += k_pair_toks) pair_tile<Ops, RP, k_pair_toks>(w, x, r, n_rows, t, y, y_stride);
  switch (t1 - t) {
    case 1: pair_tile<Ops, RP, 1>(w, x, r, n_rows, t, y, y_stride); break;
    case 2: pair_tile<Ops, RP, 2>(w, x, r, n_rows, t, y, y_stride); break;
    case 3: pair_tile<Ops, RP, 3>(w, x, r, n_rows, t, y, y_stride); break;
    default: break;
  }
}

template <class Ops>
void ggml_order_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                       float* y, int64_t y_stride) {
  __m512i* packed = nullptr;
  const size_t packed_bytes = static_cast<size_t>(x.nb) * (2 * k_pairs + 1) * sizeof(__m512i);
  if (t1 - t0 >= k_packed_min_tokens && packed_bytes <= k_max_packed_bytes) {
    auto addr = reinterpret_cast<uintptr_t>(__builtin_alloca(packed_bytes + 64));
    packed = reinterpret_cast<__m512i*>((addr + 63) & ~uintptr_t{63});
  }
  int64_t r = r0;
  if (t1 - t0 == 1) {  // decode: bound by DRAM; fewer rows in flight keep the prefetchers on them
    for (; r + 2 * k_pairs_single <= r1; r += 2 * k_pairs_single)
      pair_tile<Ops, k_pairs_single, 1>(w, x, r, 2 * k_pairs_single, t0, y, y_stride);
  }
  for (; r + 2 * k_pairs <= r1; r += 2 * k_pairs) pair_rows<Ops, k_pairs>(w, x, r, 2 * k_pairs, t0, t1, y, y_stride, packed);
  for (; r < r1; r += 2) pair_rows<Ops, 1>(w, x, r, r1 - r >= 2 ? 2 : 1, t0, t1, y, y_stride, packed);
}

template <class L>
void float_kernel(const kernel_weights& w, const float* x, int64_t x_stride, int64_t r0,
                  int64_t r1, int64_t t0, int64_t t1, float* y, int64_t y_stride) {
  int64_t r = r0;
  for (; r + k_rows <= r1; r += k_rows) float_rows<L, k_rows>(w, x, x_stride, r, t0, t1, y, y_stride);
  for (; r < r1; ++r) float_rows<L, 1>(w, x, x_stride, r, t0, t1, y, y_stride);
}

// ---- activation quantization ------------------------------------------------------------

// One block of 32 (see quantize_acts).
inline void quantize_block(const float* x, int8_t* qs, float* d, float* s, int32_t* sum16) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 v0 = _mm512_loadu_ps(x);
  const __m512 v1 = _mm512_loadu_ps(x + 16);
  const __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
  const float amax = _mm512_reduce_max_ps(a);
  const float db = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
  const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtsepi32_epi8(i0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtsepi32_epi8(i1));
  // Scales rounded through fp16 as ggml's block_q8_0 / block_q8_1 store them: the products
  // then match llama.cpp's bit for bit, which keeps greedy decoding on the same path.
  *d = round_through_fp16(db);
  sum16[0] = _mm512_reduce_add_epi32(i0);
  sum16[1] = _mm512_reduce_add_epi32(i1);
  *s = round_through_fp16(db * static_cast<float>(sum16[0] + sum16[1]));
}

inline __m512 round_through_fp16(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

// Blocks of 32 values to int8 codes with a scale each (max |x| / 127, rounded through fp16), the
// sum of each half's codes and d * sum. 16 blocks at a time share their reductions (max, sums):
// the same numbers as one block at a time (quantize_block) for finite inputs, in a third of the
// instructions (a NaN may or may not win a max, depending on the order of the reduction).
void quantize_acts(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* sum16) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const int64_t nb = n / qk32;
  int64_t b = 0;
  for (; b + 16 <= nb; b += 16) {
    const float* xb = x + b * qk32;
    __m512 a[16];
    for (int j = 0; j < 16; ++j)
      a[j] = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(xb + qk32 * j)),
                           _mm512_andnot_ps(sign, _mm512_loadu_ps(xb + qk32 * j + 16)));
    const __m512 amax = max_lanes16(a);
    const __m512 db = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    alignas(64) float id[16];
    _mm512_store_ps(id, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                            _mm512_set1_ps(127.0f), amax));
    __m512i lo[16], hi[16];
    for (int j = 0; j < 16; ++j) {
      const __m512 vid = _mm512_set1_ps(id[j]);
      lo[j] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + qk32 * j), vid));
      hi[j] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + qk32 * j + 16), vid));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + (b + j) * qk32), _mm512_cvtsepi32_epi8(lo[j]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + (b + j) * qk32 + 16), _mm512_cvtsepi32_epi8(hi[j]));
    }
    const __m512i sum_lo = sum_lanes16_epi32(lo), sum_hi = sum_lanes16_epi32(hi);
    // sum16 holds each block's halves side by side
    _mm512_storeu_si512(sum16 + 2 * b, _mm512_permutex2var_epi32(sum_lo, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), sum_hi));
    _mm512_storeu_si512(sum16 + 2 * b + 16, _mm512_permutex2var_epi32(sum_lo, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), sum_hi));
    _mm512_storeu_ps(d + b, round_through_fp16(db));
    _mm512_storeu_ps(s + b, round_through_fp16(_mm512_mul_ps(db, _mm512_cvtepi32_ps(_mm512_add_epi32(sum_lo, sum_hi)))));
  }
  for (; b < nb; ++b) quantize_block(x + b * qk32, qs + b * qk32, d + b, s + b, sum16 + 2 * b);
}

}  // namespace

const isa_kernels& avx512vnni_kernels() {
  static const isa_kernels k = {
      ggml_order_kernel<q4_0_pair>, ggml_order_kernel<q4_1_pair>, ggml_order_kernel<q8_0_pair>,
      q8_kernel<q4_k_ops>,     q8_kernel<q6_k_ops>,     float_kernel<f32_load>,
      float_kernel<f16_load>,  float_kernel<bf16_load>, quantize_acts,
  };
  return k;
}

}  // namespace troupe::model::detail

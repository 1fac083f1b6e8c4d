// The "fast" matmul kernels on AVX2 + FMA + F16C, over the same packed layout as the AVX-512 VNNI
// ones (x16_layout in detail/matmul_kernels.hpp) and with the same results bit for bit: each
// block's integer dot product is exact on both, and it is scaled and accumulated by the same
// float operations in the same order (one FMA by d_w * d_x, then one by m_w * s_x for Q4_1 and
// Q4_K), so a model decodes the same tokens on either CPU. Built with per-file -mavx2 flags.
//
// A 256-bit register holds 8 of a group's 16 rows (the low or high 32 bytes of each 64-byte
// chunk), so a group is computed as two halves of 8 rows. VPDPBUSD is replaced by pmaddubsw
// (u8 x s8 -> s16 pairs) and pmaddwd by ones (-> s32 per 4 elements). pmaddubsw saturates at
// 16 bits; the sums stay exact because
// - Q4 (0..15) x s8 (-127..127 from finite activations): a pair is at most 3810 in size, so all 8
//   registers of a block (16 pairs) add up in s16 (<= 30480) before one pmaddwd (-128, which a
//   NaN quantizes to, still fits: 30720);
// - Q6_K (0..63): a pair is at most 16002, so two registers add in s16 before each pmaddwd;
// - Q8_0 (stored + 128): the bytes go back to signed and the sign trick keeps them in range,
//   |w| (unsigned, <= 128) x (x * sign(w)): at most 32512 per pair, one pmaddwd per register.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "model/detail/matmul_kernels.hpp"

namespace troupe::model::detail {

namespace {

constexpr int k_ahead = 8;  // blocks of weights fetched ahead of the one in use
// Smallest tile that prefetches. 1 on AVX2 (AVX-512: 4): on Zen 1 the one-token tile, too, falls
// behind the hardware prefetcher (decode tg128 119 -> 127 tokens/s, 3 paired runs, bench/README.md).
constexpr int k_min_fetch_toks = 1;
constexpr int k_tile_toks = 4;  // tokens per tile (Zen 1, n_tok 16: 2 / 4 / 6 / 8 gave 251 / 281 / 283 / 281 tok/s)

inline __m256 load_fp16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i bcast32(const int32_t* p) { return _mm256_set1_epi32(*p); }

// The 8 rows of half h of a 16-row block: register k holds elements 4k..4k+3 of each row (Q8_0:
// as signed bytes), d (and m) their scales. Each layout says how its block products are summed.
struct q4_0_x8 {
  static constexpr int kBlockBytes = x16_layout::q4_0_block;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 8;  // value = (q - 8) * d
  static void load_qs(const uint8_t* p, int h, __m256i (&q)[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = load256(p + 64 * k + 32 * h);
      q[k] = _mm256_and_si256(v, m4);
      q[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
  }
  static void load(const uint8_t* p, int h, __m256i (&q)[8], __m256& d, __m256&) {
    load_qs(p, h, q);
    d = load_fp16x8(p + 256 + 16 * h);
  }
};

struct q4_1_x8 : q4_0_x8 {
  static constexpr int kBlockBytes = x16_layout::q4_1_block;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;  // value = q * d + m
  static void load(const uint8_t* p, int h, __m256i (&q)[8], __m256& d, __m256& m) {
    load_qs(p, h, q);
    d = load_fp16x8(p + 256 + 16 * h);
    m = load_fp16x8(p + 288 + 16 * h);
  }
};

struct q4_k_x8 : q4_0_x8 {  // a Q4_1-like block per sub-block of 32, f32 scales and mins
  static constexpr int kBlockBytes = x16_layout::q4_k_block;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static void load(const uint8_t* p, int h, __m256i (&q)[8], __m256& d, __m256& m) {
    load_qs(p, h, q);
    d = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 256 + 32 * h));
    m = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 320 + 32 * h));
  }
};

// The integer block sums of one token (its 8 words of activations at xb, its halves' sums at
// xsum) against the 8 rows' registers q: Q4 layouts.
template <class L>
inline __m256i q4_block_sum(const __m256i (&q)[8], const int32_t* xb, const int32_t* xsum) {
  __m256i s16 = _mm256_maddubs_epi16(q[0], bcast32(xb));
#pragma GCC unroll 7
  for (int k = 1; k < 8; ++k) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[k], bcast32(xb + k)));
  const __m256i s = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  if constexpr (L::kOffset == 0) return s;
  return _mm256_sub_epi32(s, _mm256_set1_epi32(L::kOffset * (xsum[0] + xsum[1])));
}

struct q8_0_x8 {
  static constexpr int kBlockBytes = x16_layout::q8_0_block;
  static constexpr bool kHasMin = false;
  static void load(const uint8_t* p, int h, __m256i (&q)[8], __m256& d, __m256&) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int k = 0; k < 8; ++k) q[k] = _mm256_xor_si256(load256(p + 64 * k + 32 * h), flip);  // q + 128 -> q
    d = load_fp16x8(p + 512 + 16 * h);
  }
};

inline __m256i q8_block_sum(const __m256i (&q)[8], const int32_t* xb) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(q[k]), _mm256_sign_epi8(bcast32(xb + k), q[k]));
    s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
  }
  return s;
}

// Q6_K: bytes 0..63 (value = (q - 32) * scale), one scale per half of the block: d holds
// elements 0-15's, m elements 16-31's.
struct q6_k_x8 {
  static constexpr int kBlockBytes = x16_layout::q6_k_block;
  static constexpr bool kHasMin = false;
  static void load(const uint8_t* p, int h, __m256i (&q)[8], __m256& d, __m256& m) {
    for (int k = 0; k < 8; ++k) q[k] = load256(p + 64 * k + 32 * h);
    d = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 512 + 32 * h));
    m = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 576 + 32 * h));
  }
};

// Elements 16 * part .. 16 * part + 15 (registers 4 * part .. 4 * part + 3), minus the offset.
inline __m256i q6_half_sum(const __m256i (&q)[8], const int32_t* xb, int part, int32_t xsum) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int k = 4 * part;
  const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(q[k], bcast32(xb + k)),
                                     _mm256_maddubs_epi16(q[k + 1], bcast32(xb + k + 1)));
  const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(q[k + 2], bcast32(xb + k + 2)),
                                     _mm256_maddubs_epi16(q[k + 3], bcast32(xb + k + 3)));
  const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones));
  return _mm256_sub_epi32(s, _mm256_set1_epi32(32 * xsum));
}

// Rows 8h..8h+7 of a group against tokens [t, t + T): per block the exact integer dot product,
// times d_w * d_x, plus (Q4_1, Q4_K) m_w * s_x, block after block: the AVX-512 kernels' order.
// Its walk over the activations mirrors x16_tile in matmul_x16_avx512.cpp on purpose: kernel
// files built with different -m flags share no inline code (detail/matmul_kernels.hpp).
template <class L, int T>
void x8_tile(const uint8_t* group, int h, const q8_acts& x, int64_t t, bool fetch, __m256 (&acc)[T]) {
  const int32_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  const int32_t* xsum[T];  // sums of each block's halves
  for (int j = 0; j < T; ++j) {
    xq[j] = reinterpret_cast<const int32_t*>(x.qs + (t + j) * x.qs_stride);
    xd[j] = x.d + (t + j) * x.nb_pad;
    xs[j] = x.s + (t + j) * x.nb_pad;
    xsum[j] = x.sum16 + 2 * (t + j) * x.nb_pad;
    acc[j] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < x.nb; ++b, group += L::kBlockBytes) {
    // Fetch ahead from the first tile of each group's half 0 (k_min_fetch_toks); the second half
    // reads lines the first one brought.
    if (T >= k_min_fetch_toks && fetch && h == 0)
      for (int o = 0; o < L::kBlockBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(group) + k_ahead * L::kBlockBytes + o, _MM_HINT_T0);
    __m256i q[8];
    __m256 d, m = _mm256_setzero_ps();
    L::load(group, h, q, d, m);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const int32_t* xb = xq[j] + 8 * b;
      const __m256 dx = _mm256_set1_ps(xd[j][b]);
      if constexpr (std::is_same_v<L, q6_k_x8>) {  // two scales per block, each half scaled on its own
        const __m256i lo = q6_half_sum(q, xb, 0, xsum[j][2 * b]);
        const __m256i hi = q6_half_sum(q, xb, 1, xsum[j][2 * b + 1]);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_mul_ps(d, dx), acc[j]);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_mul_ps(m, dx), acc[j]);
      } else {
        __m256i s;
        if constexpr (std::is_same_v<L, q8_0_x8>) {
          s = q8_block_sum(q, xb);
        } else {
          s = q4_block_sum<L>(q, xb, xsum[j] + 2 * b);
        }
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), acc[j]);
        if constexpr (L::kHasMin) acc[j] = _mm256_fmadd_ps(m, _mm256_set1_ps(xs[j][b]), acc[j]);
      }
    }
  }
}

// rows: lane i stored where all its bits are set (the rows of this half that [r0, r1) covers).
template <class L, int T>
void x8_store(const uint8_t* group, int h, const q8_acts& x, int64_t t, bool fetch, bool all, __m256i rows,
              float* y, int64_t y_stride) {
  __m256 acc[T];
  x8_tile<L, T>(group, h, x, t, fetch, acc);
  for (int j = 0; j < T; ++j) {
    if (all) {
      _mm256_storeu_ps(y + (t + j) * y_stride, acc[j]);
    } else {
      _mm256_maskstore_ps(y + (t + j) * y_stride, rows, acc[j]);
    }
  }
}

// The last tile of fewer than k_tile_toks tokens.
template <class L, int... Ts>
void x8_tail(std::integer_sequence<int, Ts...>, int n, const uint8_t* group, int h, const q8_acts& x, int64_t t,
             bool fetch, bool all, __m256i rows, float* y, int64_t y_stride) {
  ((n == Ts + 1 ? x8_store<L, Ts + 1>(group, h, x, t, fetch, all, rows, y, y_stride) : void()), ...);
}

// w.data: the packed matrix; w.row_stride: bytes per group of 16 rows. Rows [r0, r1) need not be
// multiples of 8: a half that [r0, r1) does not touch is skipped, one it partly covers is
// computed whole and stored masked.
template <class L>
void x16_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0, int64_t t1, float* y,
                int64_t y_stride) {
  for (int64_t g = r0 / 16; g * 16 < r1; ++g) {
    const uint8_t* group = w.data + g * static_cast<int64_t>(w.row_stride);
    for (int h = 0; h < 2; ++h) {
      const int64_t base = g * 16 + 8 * h;
      const int64_t lo = std::max<int64_t>(r0 - base, 0);
      const int64_t hi = std::min<int64_t>(r1 - base, 8);
      if (lo >= hi) continue;
      const bool all = lo == 0 && hi == 8;
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i rows = _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(static_cast<int>(lo) - 1)),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), lane));
      float* yh = y + base;
      int64_t t = t0;
      for (; t + k_tile_toks <= t1; t += k_tile_toks)
        x8_store<L, k_tile_toks>(group, h, x, t, t == t0, all, rows, yh, y_stride);
      if (t < t1)
        x8_tail<L>(std::make_integer_sequence<int, k_tile_toks - 1>{}, static_cast<int>(t1 - t), group, h, x, t,
                   t == t0, all, rows, yh, y_stride);
    }
  }
}

}  // namespace

const x16_kernels& avx2_x16_kernels() {
  static const x16_kernels k = {x16_kernel<q4_0_x8>, x16_kernel<q4_1_x8>, x16_kernel<q8_0_x8>,
                                x16_kernel<q4_k_x8>, x16_kernel<q6_k_x8>};
  return k;
}

}  // namespace troupe::model::detail

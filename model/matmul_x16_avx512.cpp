// The "fast" matmul kernels (AVX-512 VNNI) over weights repacked 16 rows at a time (see
// x16_layout in detail/matmul_kernels.hpp): one 512-bit lane per row, so a block of 32 inputs
// costs 8 VPDPBUSD for 16 rows and its integer sum is scaled once, instead of llama.cpp's
// convert, multiply and FMA per 8 partial sums. Built with AVX-512 flags (see CMakeLists.txt).
// GCC 12 warns that the intrinsics' own _mm512_undefined_* pass-through may be used
// uninitialized when a kernel inlines 8 tiles (a false positive: unmasked forms ignore it).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>

#include "model/detail/dpbusd_bcast.hpp"
#include "model/detail/matmul_kernels.hpp"

namespace troupe::model::detail {

namespace {

constexpr int k_ahead = 8;  // blocks of weights fetched ahead of the one in use
constexpr int k_min_fetch_toks = 4;  // smallest tile that prefetches k_ahead blocks ahead

// Tiles of fewer tokens stream the weights as fast as memory gives them. On AMD's Zen 4 / 5 the
// hardware prefetcher keeps up with them and software prefetch measured slower (bench/README.md);
// on an Intel Xeon (model 167, 2026-12-06) fetching 32 blocks ahead made single-sequence decode
// 1.08-1.16x faster (`troupe bench engine --batches 1`, 64-66% -> 70-75% of the streaming read).
// So: 32 blocks ahead on Intel CPUs, none elsewhere. Decided once per process.
int small_tile_ahead() {
  static const int ahead = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    const bool intel = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "GenuineIntel"
    return intel ? 32 : 0;
  }();
  return ahead;
}
constexpr int k_x16_toks = 16;  // tokens per tile (16 measured ~8% faster than 8 on Zen 4; the compiler keeps it in registers)

inline __m512 load_fp16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Weight layouts: the block of 16 rows (qs then fp16 scales) turned into 8 registers of
// unsigned bytes, register k holding elements 4k..4k+3 (Q8_0: as stored) of every row.
struct q4_0_x16 {
  static constexpr int kBlockBytes = x16_layout::q4_0_block;
  static constexpr bool kHasMin = false;
  static constexpr bool kHalves = false;
  static constexpr int kOffset = 8;  // value = (q - 8) * d
  static void load(const uint8_t* p, __m512i (&q)[8], __m512& d, __m512&) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_loadu_si512(p + 64 * k);
      q[k] = _mm512_and_si512(v, m4);
      q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    d = load_fp16x16(p + 256);
  }
};

struct q4_1_x16 {
  static constexpr int kBlockBytes = x16_layout::q4_1_block;
  static constexpr bool kHasMin = true;
  static constexpr bool kHalves = false;
  static constexpr int kOffset = 0;  // value = q * d + m
  static void load(const uint8_t* p, __m512i (&q)[8], __m512& d, __m512& m) {
    q4_0_x16::load(p, q, d, m);
    m = load_fp16x16(p + 288);
  }
};

// Q4_K: a Q4_1-like block per sub-block of 32, with f32 scales and mins (value = q * d + m).
struct q4_k_x16 {
  static constexpr int kBlockBytes = x16_layout::q4_k_block;
  static constexpr bool kHasMin = true;
  static constexpr bool kHalves = false;
  static constexpr int kOffset = 0;
  static void load(const uint8_t* p, __m512i (&q)[8], __m512& d, __m512& m) {
    q4_0_x16::load(p, q, d, m);
    d = _mm512_loadu_ps(p + 256);
    m = _mm512_loadu_ps(p + 320);
  }
};

struct q8_0_x16 {
  static constexpr int kBlockBytes = x16_layout::q8_0_block;
  static constexpr bool kHasMin = false;
  static constexpr bool kHalves = false;
  static constexpr int kOffset = 128;  // stored as q + 128 (unsigned for VPDPBUSD)
  static void load(const uint8_t* p, __m512i (&q)[8], __m512& d, __m512&) {
    for (int k = 0; k < 8; ++k) q[k] = _mm512_loadu_si512(p + 64 * k);
    d = load_fp16x16(p + 512);
  }
};

// Q6_K: bytes 0..63 (value = (q - 32) * scale), a scale for each half of the block: d holds
// elements 0-15's, m elements 16-31's.
struct q6_k_x16 {
  static constexpr int kBlockBytes = x16_layout::q6_k_block;
  static constexpr bool kHasMin = false;
  static constexpr bool kHalves = true;
  static constexpr int kOffset = 32;
  static void load(const uint8_t* p, __m512i (&q)[8], __m512& d, __m512& m) {
    for (int k = 0; k < 8; ++k) q[k] = _mm512_loadu_si512(p + 64 * k);
    d = _mm512_loadu_ps(p + 512);
    m = _mm512_loadu_ps(p + 576);
  }
};

// 16 rows of group g against tokens [t, t + T): per block, the integer dot product of the whole
// block (exact), times d_w * d_x, plus (Q4_1) m_w * s_x, accumulated block by block in that
// order. The arithmetic of one (row, token) never depends on T or on the other rows.
template <class L, int T>
void x16_tile(const uint8_t* group, const q8_acts& x, int64_t t, int ahead, __m512 (&acc)[T]) {
  const int32_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  const int32_t* xsum[T];  // sums of each block's halves
  for (int j = 0; j < T; ++j) {
    xq[j] = reinterpret_cast<const int32_t*>(x.qs + (t + j) * x.qs_stride);
    xd[j] = x.d + (t + j) * x.nb_pad;
    xs[j] = x.s + (t + j) * x.nb_pad;
    xsum[j] = x.sum16 + 2 * (t + j) * x.nb_pad;
    acc[j] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < x.nb; ++b, group += L::kBlockBytes) {
    // The packed groups lie one after another: fetch `ahead` blocks ahead, into the next group
    // (fetch_ahead: how far).
    if (ahead)
      for (int o = 0; o < L::kBlockBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(group) + ahead * L::kBlockBytes + o, _MM_HINT_T0);
    __m512i q[8];
    __m512 d, m = _mm512_setzero_ps();
    L::load(group, q, d, m);
#pragma GCC unroll 16
    for (int j = 0; j < T; ++j) {
      const int32_t* xb = xq[j] + 8 * b;
      const __m512 dx = _mm512_set1_ps(xd[j][b]);
      if constexpr (L::kHalves) {  // two scales per block: each half's integer sum scaled on its own
        __m512i lo = _mm512_set1_epi32(-L::kOffset * xsum[j][2 * b]);
        __m512i hi = _mm512_set1_epi32(-L::kOffset * xsum[j][2 * b + 1]);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          lo = dpbusd_bcast(lo, q[k], xb + k);
          hi = dpbusd_bcast(hi, q[k + 4], xb + k + 4);
        }
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(d, dx), acc[j]);
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(m, dx), acc[j]);
        continue;
      }
      __m512i s = L::kOffset ? _mm512_set1_epi32(-L::kOffset * (xsum[j][2 * b] + xsum[j][2 * b + 1]))
                             : _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) s = dpbusd_bcast(s, q[k], xb + k);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, dx), acc[j]);
      if constexpr (L::kHasMin) acc[j] = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[j][b]), acc[j]);
    }
  }
}

// Blocks a tile fetches ahead (0: none): only the group's first tile (the others find the weights
// in cache), k_ahead when it computes long enough per block for the hardware prefetcher to fall
// behind, small_tile_ahead() below that.
template <int T>
int fetch_ahead(bool first_tile) {
  if (!first_tile) return 0;
  return T >= k_min_fetch_toks ? k_ahead : small_tile_ahead();
}

template <class L, int T>
void x16_store(const uint8_t* group, const q8_acts& x, int64_t t, bool fetch, __mmask16 rows, float* y,
               int64_t y_stride) {
  __m512 acc[T];
  x16_tile<L, T>(group, x, t, fetch_ahead<T>(fetch), acc);
  for (int j = 0; j < T; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride, rows, acc[j]);
}

// w.data: the packed matrix; w.row_stride: bytes per group of 16 rows. Rows [r0, r1) need not
// be multiples of 16: a partly covered group is computed whole and stored masked.
template <class L>
void x16_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                float* y, int64_t y_stride) {
  for (int64_t g = r0 / 16; g * 16 < r1; ++g) {
    const int64_t lo = std::max<int64_t>(r0 - g * 16, 0);
    const int64_t hi = std::min<int64_t>(r1 - g * 16, 16);
    const auto rows = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
    const uint8_t* group = w.data + g * static_cast<int64_t>(w.row_stride);
    float* yg = y + g * 16;
    int64_t t = t0;
    for (; t + k_x16_toks <= t1; t += k_x16_toks) x16_store<L, k_x16_toks>(group, x, t, t == t0, rows, yg, y_stride);
    switch (t1 - t) {
      case 1: x16_store<L, 1>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 2: x16_store<L, 2>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 3: x16_store<L, 3>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 4: x16_store<L, 4>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 5: x16_store<L, 5>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 6: x16_store<L, 6>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 7: x16_store<L, 7>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 8: x16_store<L, 8>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 9: x16_store<L, 9>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 10: x16_store<L, 10>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 11: x16_store<L, 11>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 12: x16_store<L, 12>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 13: x16_store<L, 13>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 14: x16_store<L, 14>(group, x, t, t == t0, rows, yg, y_stride); break;
      case 15: x16_store<L, 15>(group, x, t, t == t0, rows, yg, y_stride); break;
      default: break;
    }
  }
}

}  // namespace

const x16_kernels& avx512vnni_x16_kernels() {
  static const x16_kernels k = {x16_kernel<q4_0_x16>, x16_kernel<q4_1_x16>, x16_kernel<q8_0_x16>,
                                x16_kernel<q4_k_x16>, x16_kernel<q6_k_x16>};
  return k;
}

}  // namespace troupe::model::detail

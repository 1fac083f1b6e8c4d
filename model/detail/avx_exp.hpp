#pragma once
// exp(x) and the 8-lane horizontal sum in ggml's order, for the engine's AVX + FMA files
// (model/cpu_ops.cpp, model/attention_avx2.cpp). Both sit in an anonymous namespace: each file
// keeps its own copy, compiled with its own flags, so the linker never mixes bodies.
#include <immintrin.h>

#include <cmath>

namespace troupe::model::detail {
namespace {

// exp(x) for 8 lanes by ggml's vectorised expf (the Arm optimized-routines one: x = n ln2 + b,
// |b| <= ln2/2, then a degree-5 polynomial in b scaled by 2^n). Written with AVX + FMA and SSE2
// integer ops only; it gives the same bits as ggml's AVX-512 version, whose 2^n scaling
// (vscalefps) is, like the multiplication below, exact or correctly rounded.
inline __m256 exp8(__m256 x) {
  const __m256 shifter = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shifter);
  const __m256 n = _mm256_sub_ps(z, shifter);  // round(x / ln2)
  // b = x - n * ln2, with ln2 split in two for accuracy
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
  const __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
  const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f));
  const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u, lo);
  const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  if (_mm256_movemask_ps(big) == 0) {
    // 2^n from the low bits of z (n + 1.5 * 2^23): shift them into the exponent field, add the bias.
    const __m256i zi = _mm256_castps_si256(z);
    const __m128i one = _mm_set1_epi32(0x3f800000);
    const __m128i k_lo = _mm_add_epi32(_mm_slli_epi32(_mm256_castsi256_si128(zi), 23), one);
    const __m128i k_hi = _mm_add_epi32(_mm_slli_epi32(_mm256_extractf128_si256(zi, 1), 23), one);
    return _mm256_mul_ps(j, _mm256_castsi256_ps(_mm256_set_m128i(k_hi, k_lo)));
  }
  // Rare (|x| > ~87): per lane, as vscalefps would; beyond |n| > 192 ggml saturates to 0 or inf.
  alignas(32) float jv[8], nv[8];
  _mm256_store_ps(jv, j);
  _mm256_store_ps(nv, n);
  for (int i = 0; i < 8; ++i) {
    if (std::isnan(nv[i])) continue;
    if (std::fabs(nv[i]) > 192.0f) jv[i] = nv[i] > 0.0f ? INFINITY : 0.0f;
    else jv[i] = std::ldexp(jv[i], static_cast<int>(nv[i]));
  }
  return _mm256_load_ps(jv);
}

// Sum of 8 lanes in the order of ggml's horizontal sums (halves, then pairs 0+2 / 1+3, then 0+1).
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace troupe::model::detail

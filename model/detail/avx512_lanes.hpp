#pragma once
// Reductions of 16 registers at once for the AVX-512 kernel files (only they include this, and
// they are built with AVX-512 flags). Everything sits in an anonymous namespace: each file keeps
// its own copy, so the linker can never hand an AVX-512 body to code built without it.
#include <immintrin.h>

namespace troupe::model::detail {
namespace {

// Lane p of the result: v[p]'s 16 lanes combined by op (commutative and associative: +, max).
// Pairs, then quads, are interleaved and combined within 128-bit lanes, then the four 128-bit
// partial results are folded across lanes: 15 ops and 30 shuffles for 16 reductions.
template <class Op>
inline __m512 reduce_lanes16(const __m512 (&v)[16], Op op) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) a[i] = op(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    b[i] = op(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 2; ++i)
    c[i] = op(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return op(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

inline __m512 sum_lanes16(const __m512 (&v)[16]) {
  return reduce_lanes16(v, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
}

inline __m512 max_lanes16(const __m512 (&v)[16]) {
  return reduce_lanes16(v, [](__m512 x, __m512 y) { return _mm512_max_ps(x, y); });
}

// Integer sums, the lanes' bits moved by the same shuffles.
inline __m512i sum_lanes16_epi32(const __m512i (&v)[16]) {
  __m512 f[16];
  for (int i = 0; i < 16; ++i) f[i] = _mm512_castsi512_ps(v[i]);
  return _mm512_castps_si512(reduce_lanes16(f, [](__m512 x, __m512 y) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_castps_si512(y)));
  }));
}

}  // namespace
}  // namespace troupe::model::detail

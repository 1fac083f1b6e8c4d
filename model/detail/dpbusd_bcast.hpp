#pragma once
// VPDPBUSD against 4 bytes broadcast from memory, for the AVX-512 VNNI kernel files (only they
// include this; anonymous namespace as in avx512_lanes.hpp).
#include <immintrin.h>

#include <cstdint>

namespace troupe::model::detail {
namespace {

// acc + the products of u8's unsigned bytes with the 4 signed bytes at *s8, repeated in every
// 32-bit lane: the instruction's embedded-broadcast form. GCC 12 does not fold
// _mm512_set1_epi32 into it but emits a VPBROADCASTD per VPDPBUSD, an extra vector operation
// that cost the fast matmul kernels ~5-10% on Zen 4 (troupe_matmul_bench, one thread).
inline __m512i dpbusd_bcast(__m512i acc, __m512i u8, const void* s8) {
  asm("vpdpbusd {%2%{1to16%}, %1, %0|%0, %1, %2%{1to16%}}"  // AT&T | Intel syntax
      : "+v"(acc)
      : "v"(u8), "m"(*static_cast<const int32_t*>(s8)));
  return acc;
}

}  // namespace
}  // namespace troupe::model::detail

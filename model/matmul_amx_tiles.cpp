// The AMX kernels over the tile layout (matmul_amx.hpp): TDPBSUD for each block's integer
// product of 16 tokens x 16 weight rows, then the x16 kernel's float steps (matmul_x16_avx512.cpp)
// in its order with AVX-512, so the result equals the fast order bit for bit. Only called where
// amx_support().available; built with -mamx-tile -mamx-int8 and the AVX-512 flags
// (cmake/TroupeKernelFlags.cmake). Tested against the AVX-512 VNNI kernels bit for bit where the
// CPU has AMX (tests/model/matmul_amx_test.cpp), and through amx_emulated_kernels() everywhere.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/matmul_amx.hpp"

namespace troupe::model::detail {

namespace {

// The LDTILECFG operand (palette 1).
struct alignas(64) tile_config {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0, 1: C (tokens x 16 int32; 1 is the second half's with halves), 2, 3: A and B of the
// (first) half, 4, 5: the second half's. Configured on every call, so every thread that runs a
// kernel has configured its own tile state (the configuration is per thread).
void configure(int n_tok, bool halves) {
  tile_config c;
  const int kbytes = halves ? 16 : 32;
  for (int t : {0, 1}) {
    c.rows[t] = static_cast<uint8_t>(n_tok);
    c.colsb[t] = 64;
  }
  for (int t : {2, 4}) {
    c.rows[t] = static_cast<uint8_t>(n_tok);
    c.colsb[t] = static_cast<uint16_t>(kbytes);
  }
  for (int t : {3, 5}) {
    c.rows[t] = static_cast<uint8_t>(kbytes / 4);
    c.colsb[t] = 64;
  }
  // GCC 12 does not treat LDTILECFG's operand as read: without this barrier it drops the stores
  // of rows and colsb above, and the tiles stay unconfigured (TILEZERO then raises #UD, SIGILL).
  __asm__ volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

template <ggml_type Type>
void amx_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0, int64_t t1, float* y,
                int64_t y_stride) {
  amx_type_traits tr;
  amx_traits(Type, &tr);
  alignas(64) int32_t c0[16][16], c1[16][16];
  int configured = 0;
  for (int64_t g = r0 / 16; g * 16 < r1; ++g) {
    const int64_t lo = std::max<int64_t>(r0 - g * 16, 0), hi = std::min<int64_t>(r1 - g * 16, 16);
    const auto rows = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
    for (int64_t t = t0; t < t1; t += 16) {
      const int n_t = static_cast<int>(std::min<int64_t>(16, t1 - t));
      if (n_t != configured) {  // a tail of fewer tokens: tiles of fewer rows, no read past x
        configure(n_t, tr.halves);
        configured = n_t;
      }
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      const uint8_t* blk = w.data + g * static_cast<int64_t>(w.row_stride);
      for (int64_t b = 0; b < x.nb; ++b, blk += amx_layout::block) {
        const int8_t* a = x.qs + t * x.qs_stride + 32 * b;
        _tile_zero(0);
        _tile_loadd(2, a, x.qs_stride);
        _tile_loadd(3, blk, 64);
        _tile_dpbsud(0, 2, 3);
        _tile_stored(0, c0, 64);
        if (tr.halves) {
          _tile_zero(1);
          _tile_loadd(4, a + 16, x.qs_stride);
          _tile_loadd(5, blk + 256, 64);
          _tile_dpbsud(1, 4, 5);
          _tile_stored(1, c1, 64);
        }
        const __m512 d = _mm512_loadu_ps(blk + 512);
        const __m512 m = _mm512_loadu_ps(blk + 576);
        for (int j = 0; j < n_t; ++j) {
          const __m512 dx = _mm512_set1_ps(x.d[(t + j) * x.nb_pad + b]);
          const int32_t* sum = x.sum16 + 2 * (t + j) * x.nb_pad + 2 * b;
          const __m512i cj = _mm512_load_si512(c0[j]);
          if (tr.halves) {
            const __m512i lo_s = _mm512_add_epi32(cj, _mm512_set1_epi32(-tr.offset * sum[0]));
            const __m512i hi_s = _mm512_add_epi32(_mm512_load_si512(c1[j]), _mm512_set1_epi32(-tr.offset * sum[1]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo_s), _mm512_mul_ps(d, dx), acc[j]);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi_s), _mm512_mul_ps(m, dx), acc[j]);
            continue;
          }
          const __m512i s = _mm512_add_epi32(cj, _mm512_set1_epi32(-tr.offset * (sum[0] + sum[1])));
          acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, dx), acc[j]);
          if (tr.has_min) acc[j] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.s[(t + j) * x.nb_pad + b]), acc[j]);
        }
      }
      for (int j = 0; j < n_t; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride + g * 16, rows, acc[j]);
    }
  }
}

}  // namespace

const x16_kernels& amx_kernels() {
  static const x16_kernels k = {amx_kernel<ggml_type::q4_0>, amx_kernel<ggml_type::q4_1>, amx_kernel<ggml_type::q8_0>,
                                amx_kernel<ggml_type::q4_k>, amx_kernel<ggml_type::q6_k>};
  return k;
}

}  // namespace troupe::model::detail

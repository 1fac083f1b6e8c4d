// The AMX kernels over the tile layout (matmul_amx.hpp): TDPBSUD for each block's integer
// product of 16 tokens x 16 weight rows, then the x16 kernel's float steps (matmul_x16_avx512.cpp)
// in its order with AVX-512, so the result equals the fast order bit for bit. Only called where
// amx_support().available; built with -mamx-tile -mamx-int8 and the AVX-512 flags
// (cmake/TroupeKernelFlags.cmake). Tested against the AVX-512 VNNI kernels bit for bit where the
// CPU has AMX (tests/model/matmul_amx_test.cpp), and through amx_emulated_kernels() everywhere.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

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

// Every 32-input block has its own scales, so each block's integer product leaves the tiles
// (TILESTORED, 1 KiB) to be scaled with AVX-512 before the next block's is added. Done block by
// block on one C tile, every block waited for the tile multiply, the store and the reload in turn:
// 3x slower than the VNNI kernels (Xeon model 167, 16 tokens). So the tile unit runs ahead of the
// scaling: while block b is scaled, block b + 2 is multiplied and block b + 1 stored (a rotation
// of C tiles 0-3; A / B tiles 4 / 5 for even blocks, 6 / 7 for odd). Q6_K, whose blocks need two
// products each (one per half), multiplies 2 blocks per group instead (C 0, 1 block 0's halves,
// 2, 3 block 1's), the next group's products issued before this group's are scaled.

struct tile_shape {
  int n_tok = 0;
  bool halves = false;
};

// The configuration is per thread and survives calls: LDTILECFG (which also zeroes every tile)
// runs only when this thread's shape changes.
thread_local tile_shape configured_shape;

void configure(int n_tok, bool halves) {
  if (configured_shape.n_tok == n_tok && configured_shape.halves == halves) return;
  tile_config c;
  const int kbytes = halves ? 16 : 32;
  for (int t : {0, 1, 2, 3}) {
    c.rows[t] = static_cast<uint8_t>(n_tok);
    c.colsb[t] = 64;
  }
  for (int t : {4, 6}) {
    c.rows[t] = static_cast<uint8_t>(n_tok);
    c.colsb[t] = static_cast<uint16_t>(kbytes);
  }
  for (int t : {5, 7}) {
    c.rows[t] = static_cast<uint8_t>(kbytes / 4);
    c.colsb[t] = 64;
  }
  // GCC 12 does not treat LDTILECFG's operand as read: without this barrier it drops the stores
  // of rows and colsb above, and the tiles stay unconfigured (TILEZERO then raises #UD, SIGILL).
  __asm__ volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
  configured_shape = {n_tok, halves};
}

// Q6_K: one group of n blocks' (1 or 2) products into C 0-3, both halves of each block.
using c_buffer = int32_t[16][16];
inline void pair_products(const int8_t* a, int64_t lda, const uint8_t* blk, int n) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_loadd(4, a, lda);
  _tile_loadd(5, blk, 64);
  _tile_loadd(6, a + 16, lda);
  _tile_loadd(7, blk + 256, 64);
  _tile_dpbsud(0, 4, 5);
  _tile_dpbsud(1, 6, 7);
  if (n < 2) return;
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a + 32, lda);
  _tile_loadd(5, blk + amx_layout::block, 64);
  _tile_loadd(6, a + 48, lda);
  _tile_loadd(7, blk + amx_layout::block + 256, 64);
  _tile_dpbsud(2, 4, 5);
  _tile_dpbsud(3, 6, 7);
}

// pair_products(n) out of the C tiles into out[2i], out[2i + 1].
inline void pair_store(int n, c_buffer* out) {
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  if (n < 2) return;
  _tile_stored(2, out[2], 64);
  _tile_stored(3, out[3], 64);
}

// Block b's products (c; with halves, c the first half's and hi the second's) for tokens
// [t, t + T), scaled with the x16 kernel's float steps in its order and added to acc.
template <ggml_type Type, int T>
inline void scale_block(const uint8_t* blk, const q8_acts& x, int64_t t, int64_t b, const c_buffer& c,
                        const c_buffer& hi, __m512 (&acc)[T]) {
  constexpr amx_type_traits tr = *amx_traits(Type);
  const __m512 d = _mm512_loadu_ps(blk + 512);
  const __m512 m = _mm512_loadu_ps(blk + 576);
#pragma GCC unroll 16
  for (int j = 0; j < T; ++j) {
    const __m512 dx = _mm512_set1_ps(x.d[(t + j) * x.nb_pad + b]);
    const int32_t* sum = x.sum16 + 2 * (t + j) * x.nb_pad + 2 * b;
    if constexpr (tr.halves) {
      const __m512i lo_s = _mm512_add_epi32(_mm512_load_si512(c[j]), _mm512_set1_epi32(-tr.offset * sum[0]));
      const __m512i hi_s = _mm512_add_epi32(_mm512_load_si512(hi[j]), _mm512_set1_epi32(-tr.offset * sum[1]));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo_s), _mm512_mul_ps(d, dx), acc[j]);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi_s), _mm512_mul_ps(m, dx), acc[j]);
      continue;
    }
    __m512i s = _mm512_load_si512(c[j]);
    if constexpr (tr.offset != 0) s = _mm512_add_epi32(s, _mm512_set1_epi32(-tr.offset * (sum[0] + sum[1])));
    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, dx), acc[j]);
    if constexpr (tr.has_min) acc[j] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.s[(t + j) * x.nb_pad + b]), acc[j]);
  }
}

// The rotation's slots (C tile, then its A and B tiles). GCC's tile intrinsics paste their tile
// numbers into the instruction's text, so each slot is spelled out.
template <int C>
void product1(const int8_t* a, int64_t lda, const uint8_t* blk);
template <int C>
void store1(c_buffer& out);
#define TROUPE_AMX_SLOT(C, A, B)                                                         \
  template <>                                                                            \
  inline void product1<C>(const int8_t* a, int64_t lda, const uint8_t* blk) {            \
    _tile_zero(C);                                                                       \
    _tile_loadd(A, a, lda);                                                              \
    _tile_loadd(B, blk, 64);                                                             \
    _tile_dpbsud(C, A, B);                                                               \
  }                                                                                      \
  template <>                                                                            \
  inline void store1<C>(c_buffer & out) {                                                \
    _tile_stored(C, out, 64);                                                            \
  }
TROUPE_AMX_SLOT(0, 4, 5)
TROUPE_AMX_SLOT(1, 6, 7)
TROUPE_AMX_SLOT(2, 4, 5)
TROUPE_AMX_SLOT(3, 6, 7)
#undef TROUPE_AMX_SLOT

// 16 rows of one group against tokens [t, t + T), one product per block: block b (slot P = b % 4)
// scaled with the x16 kernel's float steps in its order, after issuing block b + 2's product and
// block b + 1's store. T is a constant so that the accumulators stay in registers.
template <ggml_type Type, int T, int P>
inline void rotation_step(const uint8_t* group, const q8_acts& x, int64_t t, int64_t b, const int8_t* a_t,
                          c_buffer (&buf)[4], __m512 (&acc)[T]) {
  if (b + 2 < x.nb) product1<(P + 2) % 4>(a_t + 32 * (b + 2), x.qs_stride, group + (b + 2) * amx_layout::block);
  if (b + 1 < x.nb) store1<(P + 1) % 4>(buf[(P + 1) % 4]);
  // Block b + 8, fetched now: tile loads wait for every line, and the hardware prefetcher does
  // not run ahead of them.
  for (int o = 0; o < amx_layout::block; o += 64) _mm_prefetch(reinterpret_cast<const char*>(group + (b + 8) * amx_layout::block) + o, _MM_HINT_T0);
  scale_block<Type, T>(group + b * amx_layout::block, x, t, b, buf[P], buf[P], acc);
}

template <ggml_type Type, int T>
void amx_rotation(const uint8_t* group, const q8_acts& x, int64_t t, __mmask16 rows, float* y, int64_t y_stride) {
  configure(T, false);
  alignas(64) c_buffer buf[4];
  __m512 acc[T];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const int8_t* a_t = x.qs + t * x.qs_stride;
  product1<0>(a_t, x.qs_stride, group);
  if (x.nb > 1) product1<1>(a_t + 32, x.qs_stride, group + amx_layout::block);
  store1<0>(buf[0]);
  for (int64_t b = 0; b < x.nb; b += 4) {
    rotation_step<Type, T, 0>(group, x, t, b, a_t, buf, acc);
    if (b + 1 < x.nb) rotation_step<Type, T, 1>(group, x, t, b + 1, a_t, buf, acc);
    if (b + 2 < x.nb) rotation_step<Type, T, 2>(group, x, t, b + 2, a_t, buf, acc);
    if (b + 3 < x.nb) rotation_step<Type, T, 3>(group, x, t, b + 3, a_t, buf, acc);
  }
  for (int j = 0; j < T; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride, rows, acc[j]);
}

// Q6_K: 16 rows of one group against tokens [t, t + T), two blocks per group of products.
template <int T>
void amx_pairs(const uint8_t* group, const q8_acts& x, int64_t t, __mmask16 rows, float* y, int64_t y_stride) {
  alignas(64) c_buffer c[2][4];  // two groups' products: one scaled, one in flight
  configure(T, true);
  __m512 acc[T];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const int8_t* a_t = x.qs + t * x.qs_stride;
  const int first = static_cast<int>(std::min<int64_t>(2, x.nb));
  pair_products(a_t, x.qs_stride, group, first);
  pair_store(first, c[0]);
  for (int64_t b0 = 0, k = 0; b0 < x.nb; b0 += 2, k ^= 1) {
    const int n = static_cast<int>(std::min<int64_t>(2, x.nb - b0));
    const char* ahead = reinterpret_cast<const char*>(group + (b0 + 4) * amx_layout::block);
    for (int o = 0; o < 2 * amx_layout::block; o += 64) _mm_prefetch(ahead + o, _MM_HINT_T0);
    // The next group's products run on the tile unit while this group's are scaled; their
    // stores come after the scaling, so that its loads do not wait behind them.
    const int64_t b1 = b0 + 2;
    const int n1 = b1 < x.nb ? static_cast<int>(std::min<int64_t>(2, x.nb - b1)) : 0;
    if (n1) pair_products(a_t + 32 * b1, x.qs_stride, group + b1 * amx_layout::block, n1);
    for (int i = 0; i < n; ++i)
      scale_block<ggml_type::q6_k, T>(group + (b0 + i) * amx_layout::block, x, t, b0 + i, c[k][2 * i], c[k][2 * i + 1],
                                      acc);
    if (n1) pair_store(n1, c[k ^ 1]);
  }
  for (int j = 0; j < T; ++j) _mm512_mask_storeu_ps(y + (t + j) * y_stride, rows, acc[j]);
}

template <ggml_type Type, int... T>
constexpr auto token_table(std::integer_sequence<int, T...>) {
  using fn = void (*)(const uint8_t*, const q8_acts&, int64_t, __mmask16, float*, int64_t);
  if constexpr (Type == ggml_type::q6_k) return std::array<fn, sizeof...(T)>{amx_pairs<T + 1>...};
  else return std::array<fn, sizeof...(T)>{amx_rotation<Type, T + 1>...};
}

template <ggml_type Type>
void amx_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0, int64_t t1, float* y,
                int64_t y_stride) {
  static constexpr auto by_tokens = token_table<Type>(std::make_integer_sequence<int, 16>{});
  for (int64_t g = r0 / 16; g * 16 < r1; ++g) {
    const int64_t lo = std::max<int64_t>(r0 - g * 16, 0), hi = std::min<int64_t>(r1 - g * 16, 16);
    const auto rows = static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
    const uint8_t* group = w.data + g * static_cast<int64_t>(w.row_stride);
    for (int64_t t = t0; t < t1; t += 16)
      by_tokens[std::min<int64_t>(16, t1 - t) - 1](group, x, t, rows, y + g * 16, y_stride);
  }
}

}  // namespace

const x16_kernels& amx_kernels() {
  static const x16_kernels k = {amx_kernel<ggml_type::q4_0>, amx_kernel<ggml_type::q4_1>, amx_kernel<ggml_type::q8_0>,
                                amx_kernel<ggml_type::q4_k>, amx_kernel<ggml_type::q6_k>};
  return k;
}

}  // namespace troupe::model::detail

// Decode/prefill attention in the fast order with 256-bit registers: model/attention_avx512.cpp's
// arithmetic lane for lane, each of that kernel's 16-position registers held here as two of 8
// (positions 0-7, then 8-15), so that a CPU without AVX-512 gets the same outputs, bit for bit.
// - K by column, fp16: the same four FMA chains per head and position; q8: per block of 32
//   values the same exact integer dot product, taken as the signed codes times the query codes
//   (VPMADDUBSW on |code| and the query's codes signed by it, then VPMADDWD: no pair can
//   saturate, 2 x 128 x 127 < 2^15), which is what VPDPBUSD's sum less 128 x the query block's
//   sum comes to; then the same float scaling.
// - K by row: the 16 dot products of a chunk out of the same transposing reduction, one 256-bit
//   half at a time (sum_halves8).
// - Softmax: ggml's exp (model/detail/avx_exp.hpp, the bits of the AVX-512 kernel's exp16) and
//   the same 16 float lanes of sums, reduced as _mm512_reduce_add_ps reduces them.
// - V: every output value one FMA chain over positions, as there; weighed in slices of 32 values
//   for up to 3 heads per pass (12 accumulators of the 16 registers).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "model/detail/attention_avx2.hpp"
#include "model/detail/avx_exp.hpp"
#include "model/detail/kv_prefetch.hpp"

namespace troupe::model::detail {

namespace {

constexpr int k_chunk = 16;          // positions scored together (two registers of results)
constexpr int k_heads_per_pass = 3;  // query heads scored or weighed in one pass over K or V

// Value types: f16 and f32 values as stored; q8 codes, each row scaled by its own float
// (kScaled: V's weights are multiplied by the row's scale instead of every value).
struct f16_kv {
  using type = uint16_t;
  static constexpr bool type_is_f32 = false;
  static constexpr bool kScaled = false;
  static __m256 load8(const type* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct f32_kv {
  using type = float;
  static constexpr bool type_is_f32 = true;
  static constexpr bool kScaled = false;
  static __m256 load8(const type* p) { return _mm256_loadu_ps(p); }
};
struct q8_kv {
  using type = int8_t;
  static constexpr bool type_is_f32 = false;
  static constexpr bool kScaled = true;
  static __m256 load8(const type* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
};

// The first m (<= 8) lanes of v to dst.
inline void store8(float* dst, __m256 v, int m) {
  if (m >= 8) return _mm256_storeu_ps(dst, v);
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  std::memcpy(dst, t, static_cast<size_t>(m) * sizeof(float));
}

// Lane p of the result: the 8 lanes of w[p] summed as the AVX-512 kernel's sum_lanes16 sums a
// 256-bit half of its register: in each 128-bit block (x0 + x2) + (x1 + x3), then the two blocks.
// sum_lanes16's lane p is then sum_halves8(lower halves) + sum_halves8(upper halves).
inline __m256 sum_halves8(const __m256* w) {
  __m256 a[4], b[2];
  for (int i = 0; i < 4; ++i)
    a[i] = _mm256_add_ps(_mm256_unpacklo_ps(w[2 * i], w[2 * i + 1]), _mm256_unpackhi_ps(w[2 * i], w[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    b[i] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm256_add_ps(_mm256_permute2f128_ps(b[0], b[1], 0x20), _mm256_permute2f128_ps(b[0], b[1], 0x31));
}

// Scores of n <= 16 consecutive positions whose K rows start at kp, for every head of the group,
// times scale, into scratch[h * n_ctx + pos0 ...].
template <class E, int HD>
void score_chunk(const typename E::type* kp, int n, const float* qg, int group, float scale, float* scratch,
                 int64_t n_ctx, int32_t pos0, prefetch_cursor<HD, typename E::type>& ahead) {
  constexpr int R = HD / 16;  // the AVX-512 kernel's registers per row
  alignas(32) float widened[E::type_is_f32 ? 1 : k_chunk * HD];
  const float* rows;
  if constexpr (E::type_is_f32) {
    for (int p = 0; p < n; ++p) ahead.next();
    rows = kp;
  } else {
    for (int p = 0; p < n; ++p) {
      ahead.next();
      for (int i = 0; i < 2 * R; ++i) _mm256_store_ps(widened + p * HD + 8 * i, E::load8(kp + p * HD + 8 * i));
    }
    rows = widened;
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int h = 0; h < group; ++h) {
    const float* qh = qg + h * HD;
    __m256 lo[k_chunk], hi[k_chunk];  // lanes 0-7 and 8-15 of the AVX-512 kernel's v[p]
    for (int p = 0; p < k_chunk; ++p) {
      if (p >= n) {
        lo[p] = hi[p] = _mm256_setzero_ps();
        continue;
      }
      const float* r = rows + p * HD;
      __m256 sl = _mm256_mul_ps(_mm256_loadu_ps(r), _mm256_loadu_ps(qh));
      __m256 sh = _mm256_mul_ps(_mm256_loadu_ps(r + 8), _mm256_loadu_ps(qh + 8));
      for (int i = 1; i < R; ++i) {
        sl = _mm256_fmadd_ps(_mm256_loadu_ps(r + 16 * i), _mm256_loadu_ps(qh + 16 * i), sl);
        sh = _mm256_fmadd_ps(_mm256_loadu_ps(r + 16 * i + 8), _mm256_loadu_ps(qh + 16 * i + 8), sh);
      }
      lo[p] = sl;
      hi[p] = sh;
    }
    float* dst = scratch + h * n_ctx + pos0;
    for (int half = 0; half < 2 && 8 * half < n; ++half) {
      const __m256 s = _mm256_add_ps(sum_halves8(lo + 8 * half), sum_halves8(hi + 8 * half));
      store8(dst + 8 * half, _mm256_mul_ps(s, vscale), n - 8 * half);
    }
  }
}

// The scores of every head of the group over K by row, into scratch[h * n_ctx + pos].
template <class E, int HD>
void score_by_row(const typename E::type* K, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                  const float* qg, int group, float scale, float* scratch, prefetch_cursor<HD, typename E::type>& ahead) {
  const int bs = kv.block_size;
  for (int32_t p0 = 0, b = 0; p0 < n_ctx; p0 += bs, ++b) {
    const int64_t off = kv.offset(block_table[b], ahead.kv_head, 0);
    const int n = std::min(bs, n_ctx - p0);
    for (int c = 0; c < n; c += k_chunk)
      score_chunk<E, HD>(K + off + static_cast<int64_t>(c) * HD, std::min(k_chunk, n - c), qg, group, scale, scratch,
                         n_ctx, p0 + c, ahead);
  }
}

// Scores of n <= 16 consecutive slots of fp16 K by column (col: the chunk's first slot in value
// 0's column; columns bs apart) for heads [0, NH) of qh, times scale, into dst[h * n_ctx ...].
// Four partial sums per head, as the AVX-512 kernel keeps them; positions 0-7, then 8-15.
template <int HD, int NH>
void score_columns_f16(const uint16_t* col, int bs, int n, const float* qh, float scale, float* dst, int64_t n_ctx) {
  constexpr int U = 4;
  alignas(32) uint16_t staged[HD * k_chunk];
  if (n < k_chunk) {  // a last, partial chunk: its slots copied, so that no load reads past the block
    for (int d = 0; d < HD; ++d)
      for (int i = 0; i < k_chunk; ++i) staged[d * k_chunk + i] = i < n ? col[static_cast<int64_t>(d) * bs + i] : 0;
    col = staged;
    bs = k_chunk;
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int half = 0; 8 * half < n; ++half) {
    __m256 acc[NH][U];
    for (auto& a : acc)
      for (auto& r : a) r = _mm256_setzero_ps();
    for (int d = 0; d < HD; d += U) {
      for (int u = 0; u < U; ++u) {
        const uint16_t* p = col + static_cast<int64_t>(d + u) * bs + 8 * half;
        const __m256 k = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        for (int h = 0; h < NH; ++h) acc[h][u] = _mm256_fmadd_ps(k, _mm256_set1_ps(qh[h * HD + d + u]), acc[h][u]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[h][0], acc[h][1]), _mm256_add_ps(acc[h][2], acc[h][3]));
      store8(dst + h * n_ctx + 8 * half, _mm256_mul_ps(s, vscale), n - 8 * half);
    }
  }
}

// A query head quantized as llama.cpp quantizes activations against q8_0 K: int8 codes per 32
// values with a scale each (max |x| / 127), as the AVX-512 kernel's q8_query (without the code
// sums: the dot products below are taken against the signed codes directly).
template <int HD>
struct q8_query {
  static constexpr int NB = HD / 32;
  alignas(32) int8_t qs[HD];
  float d[NB];
  void set(const float* x) {
    for (int b = 0; b < NB; ++b) quantize_row_q8_avx2(x + 32 * b, 32, qs + 32 * b, &d[b]);
  }
};

// Scores of n <= 16 consecutive slots of q8 K by column (col: the chunk's first slot in the first
// 4 values' column; such columns bs * 4 bytes apart, codes stored + 128; ks: the slots' row
// scales) for heads [0, NH) of qq: per block of 32 values the exact integer dot product of the
// codes with the query's, scaled by both scales.
template <int HD, int NH>
void score_columns_q8(const uint8_t* col, const float* ks, int bs, int n, const q8_query<HD>* qq, float scale,
                      float* dst, int64_t n_ctx) {
  constexpr int NB = HD / 32;
  alignas(32) uint8_t staged[HD * k_chunk];
  alignas(32) float staged_scales[k_chunk];
  if (n < k_chunk) {  // a last, partial chunk, as score_columns_f16 stages it (code 0 beyond n)
    for (int g = 0; g < HD / 4; ++g)
      for (int i = 0; i < k_chunk; ++i)
        for (int c = 0; c < 4; ++c)
          staged[(g * k_chunk + i) * 4 + c] = i < n ? col[(static_cast<int64_t>(g) * bs + i) * 4 + c] : 128;
    for (int i = 0; i < k_chunk; ++i) staged_scales[i] = i < n ? ks[i] : 0.0f;
    col = staged;
    ks = staged_scales;
    bs = k_chunk;
  }
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int half = 0; 8 * half < n; ++half) {
    __m256i acc[NH][NB];
    for (auto& a : acc)
      for (auto& r : a) r = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g)
      for (int b = 0; b < NB; ++b) {
        const uint8_t* p = col + static_cast<int64_t>(8 * b + g) * bs * 4 + 32 * half;
        const __m256i c = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), flip);  // signed codes
        const __m256i mag = _mm256_abs_epi8(c);  // -128 (zeroed memory) reads 128 as unsigned: still exact
        for (int h = 0; h < NH; ++h) {
          int32_t four;
          std::memcpy(&four, qq[h].qs + 32 * b + 4 * g, sizeof four);
          const __m256i pairs = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(_mm256_set1_epi32(four), c));
          acc[h][b] = _mm256_add_epi32(acc[h][b], _mm256_madd_epi16(pairs, ones));
        }
      }
    const __m256 kscale = _mm256_mul_ps(_mm256_loadu_ps(ks + 8 * half), _mm256_set1_ps(scale));
    for (int h = 0; h < NH; ++h) {
      __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[h][0]), _mm256_set1_ps(qq[h].d[0]));
      for (int b = 1; b < NB; ++b) s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][b]), _mm256_set1_ps(qq[h].d[b]), s);
      store8(dst + h * n_ctx + 8 * half, _mm256_mul_ps(s, kscale), n - 8 * half);
    }
  }
}

// Calls fn(std::integral_constant<int, nh>) for nh in 1..3 (k_heads_per_pass).
template <class F>
void with_heads(int nh, F&& fn) {
  switch (nh) {
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    default: fn(std::integral_constant<int, 1>{}); break;
  }
}

// The scores of every head of the group over K by column, up to 3 heads per pass over the
// sequence's blocks, into scratch[h * n_ctx + pos].
template <class E, int HD>
void score_by_column(const typename E::type* K, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                     const float* qg, int group, float scale, float* scratch,
                     prefetch_cursor<HD, typename E::type>& ahead) {
  constexpr bool q8 = std::is_same_v<E, q8_kv>;
  static_assert(q8 || std::is_same_v<E, f16_kv>, "K by column is fp16 or q8");
  const int bs = kv.block_size;
  for (int h0 = 0; h0 < group; h0 += k_heads_per_pass) {
    const int nh = std::min(k_heads_per_pass, group - h0);
    q8_query<HD> qq[k_heads_per_pass];
    if constexpr (q8)
      for (int h = 0; h < nh; ++h) qq[h].set(qg + static_cast<int64_t>(h0 + h) * HD);
    const float* qh = qg + static_cast<int64_t>(h0) * HD;
    for (int32_t p0 = 0, b = 0; p0 < n_ctx; p0 += bs, ++b) {
      const int64_t off = kv.offset(block_table[b], ahead.kv_head, 0);
      const int n = std::min(bs, n_ctx - p0);
      for (int c = 0; c < n; c += k_chunk) {
        const int m = std::min(k_chunk, n - c);
        if (h0 == 0)
          for (int p = 0; p < m; ++p) ahead.next();
        float* dst = scratch + static_cast<int64_t>(h0) * n_ctx + p0 + c;
        with_heads(nh, [&](auto NH) {
          if constexpr (q8)
            score_columns_q8<HD, NH()>(reinterpret_cast<const uint8_t*>(K) + off + 4 * c, kv.k_scale + off / HD + c, bs,
                                       m, qq, scale, dst, n_ctx);
          else
            score_columns_f16<HD, NH()>(K + off + c, bs, m, qh, scale, dst, n_ctx);
        });
      }
    }
  }
}

// Heads [0, NH) of w (rows of n_ctx unnormalised weights): the weighted sum of V over all
// positions, times inv[h], into out[h * HD ...]. One FMA chain per output value, 32 values (one
// slice) per pass over the positions.
template <class E, int HD, int NH>
void weigh_values(const typename E::type* V, const kv_layer_view& kv, const int32_t* block_table, int kv_head,
                  int32_t n_ctx, const float* w, const float* inv, float* out,
                  prefetch_cursor<HD, typename E::type>* ahead) {
  constexpr int RW = 4;  // registers per slice
  const int bs = kv.block_size;
  for (int d0 = 0; d0 < HD; d0 += 8 * RW) {
    __m256 acc[NH][RW];
    for (auto& a : acc)
      for (auto& r : a) r = _mm256_setzero_ps();
    // (ahead: the walk's cursor on the first pass over V, null on the next ones)
    auto* cursor = d0 == 0 ? ahead : nullptr;
    for (int32_t p0 = 0, b = 0; p0 < n_ctx; p0 += bs, ++b) {
      const int64_t off = kv.offset(block_table[b], kv_head, 0);
      const auto* rows = V + off + d0;
      const float* vs = E::kScaled ? kv.v_scale + off / HD : nullptr;
      const int n = std::min(bs, n_ctx - p0);
      for (int s = 0; s < n; ++s) {
        if (cursor) cursor->next();
        __m256 v[RW];
        for (int i = 0; i < RW; ++i) v[i] = E::load8(rows + s * HD + 8 * i);
        for (int h = 0; h < NH; ++h) {
          float wv = w[h * static_cast<int64_t>(n_ctx) + p0 + s];
          if constexpr (E::kScaled) wv *= vs[s];
          const __m256 wh = _mm256_set1_ps(wv);
          for (int i = 0; i < RW; ++i) acc[h][i] = _mm256_fmadd_ps(wh, v[i], acc[h][i]);
        }
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < RW; ++i)
        _mm256_storeu_ps(out + h * HD + d0 + 8 * i, _mm256_mul_ps(acc[h][i], _mm256_set1_ps(inv[h])));
  }
}

// The largest of 8 lanes.
inline float max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Softmax's numerators in place: row[i] = exp(row[i] - max), and 1 / their sum (summed in 16
// float lanes, then across them as the AVX-512 kernel's sum is); the max and the sum into
// stats[0], stats[1] when asked. A NaN score makes the row's weights NaN.
float softmax_row(float* row, int32_t n, float* stats) {
  __m256 mlo = _mm256_set1_ps(row[0]), mhi = mlo;
  alignas(32) float tail[k_chunk];
  for (int32_t i = 0; i < n; i += k_chunk) {
    const float* x = row + i;
    if (n - i < k_chunk) {  // lanes past the row keep the max: -inf never raises it
      for (int k = 0; k < k_chunk; ++k) tail[k] = k < n - i ? row[i + k] : -std::numeric_limits<float>::infinity();
      x = tail;
    }
    mlo = _mm256_max_ps(_mm256_loadu_ps(x), mlo);
    mhi = _mm256_max_ps(_mm256_loadu_ps(x + 8), mhi);
  }
  const float mx = max8(_mm256_max_ps(mhi, mlo));
  const __m256 sh = _mm256_set1_ps(mx);
  __m256 slo = _mm256_setzero_ps(), shi = _mm256_setzero_ps();
  for (int32_t i = 0; i < n; i += k_chunk) {
    const int m = static_cast<int>(std::min<int32_t>(k_chunk, n - i));
    __m256 elo, ehi;
    if (m == k_chunk) {
      elo = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + i), sh));
      ehi = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + i + 8), sh));
      _mm256_storeu_ps(row + i, elo);
      _mm256_storeu_ps(row + i + 8, ehi);
    } else {  // lanes past the row are zero, as the AVX-512 kernel's masked lanes
      for (int k = 0; k < k_chunk; ++k) tail[k] = k < m ? row[i + k] : 0.0f;
      elo = exp8(_mm256_sub_ps(_mm256_load_ps(tail), sh));
      ehi = exp8(_mm256_sub_ps(_mm256_load_ps(tail + 8), sh));
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      elo = _mm256_and_ps(elo, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(m), lane)));
      ehi = _mm256_and_ps(ehi, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(m - 8), lane)));
      _mm256_store_ps(tail, elo);
      _mm256_store_ps(tail + 8, ehi);
      std::memcpy(row + i, tail, static_cast<size_t>(m) * sizeof(float));
    }
    slo = _mm256_add_ps(slo, elo);
    shi = _mm256_add_ps(shi, ehi);
  }
  const float total = hsum8(_mm256_add_ps(shi, slo));  // _mm512_reduce_add_ps's order
  if (stats) {
    stats[0] = mx;
    stats[1] = total;
  }
  return 1.0f / total;
}

// Softmax of each head's scores in scratch, then V weighed into og, up to 3 heads per pass.
template <class E, int HD>
void weigh_all(const typename E::type* V, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
               int kv_head, int group, float* og, float* scratch, prefetch_cursor<HD, typename E::type>& ahead,
               float* stats) {
  float inv[k_heads_per_pass];
  for (int h0 = 0; h0 < group; h0 += k_heads_per_pass) {
    const int nh = std::min(k_heads_per_pass, group - h0);
    float* w = scratch + static_cast<int64_t>(h0) * n_ctx;
    for (int h = 0; h < nh; ++h)
      inv[h] = softmax_row(w + static_cast<int64_t>(h) * n_ctx, n_ctx, stats ? stats + 2 * (h0 + h) : nullptr);
    float* o = og + static_cast<int64_t>(h0) * HD;
    auto* first = h0 == 0 ? &ahead : nullptr;
    with_heads(nh, [&](auto NH) { weigh_values<E, HD, NH()>(V, kv, block_table, kv_head, n_ctx, w, inv, o, first); });
  }
}

template <class E, int HD>
void attend(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head, int group,
            float scale, float* og, float* scratch, float* stats) {
  const auto* K = static_cast<const typename E::type*>(kv.k);
  const auto* V = static_cast<const typename E::type*>(kv.v);
  const float* qg = q + static_cast<int64_t>(kv_head) * group * HD;
  const float* k_scales = E::kScaled ? kv.k_scale : nullptr;
  const float* v_scales = E::kScaled ? kv.v_scale : nullptr;
  prefetch_cursor<HD, typename E::type> ahead(kv, block_table, kv_head, n_ctx, K, k_scales, V, v_scales);
  if constexpr (std::is_same_v<E, q8_kv>) score_by_column<E, HD>(K, kv, block_table, n_ctx, qg, group, scale, scratch, ahead);
  else if constexpr (std::is_same_v<E, f32_kv>) score_by_row<E, HD>(K, kv, block_table, n_ctx, qg, group, scale, scratch, ahead);
  else if (kv.k_by_column) score_by_column<E, HD>(K, kv, block_table, n_ctx, qg, group, scale, scratch, ahead);
  else score_by_row<E, HD>(K, kv, block_table, n_ctx, qg, group, scale, scratch, ahead);
  weigh_all<E, HD>(V, kv, block_table, n_ctx, kv_head, group, og, scratch, ahead, stats);
}

}  // namespace

void quantize_row_q8_avx2(const float* x, int n, int8_t* codes, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_EQ_OQ));  // 0 unless NaN/inf
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
  }
  const bool all_finite = _mm256_movemask_ps(finite) == 0xFF;
  const float d = max8(amax) / 127.0f;
  const float id = all_finite && d > 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  for (int i = 0; i < n; i += 8) {
    // rounded to nearest even, as nearbyint; |x * id| <= 127, so the packs' saturation never acts
    const __m256i c = all_finite ? _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vid)) : _mm256_setzero_si256();
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packs_epi16(w16, w16));
  }
  *scale = all_finite ? d : std::numeric_limits<float>::quiet_NaN();
}

void merge_parts_avx2(const float* parts, const float* stats, int n_parts, int group, int head_dim, float* out) {
  for (int h = 0; h < group; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < n_parts; ++p) mx = std::max(mx, stats[2 * (p * group + h)]);
    // As merge_parts_avx512: each part weighed by its share of the whole softmax sum.
    __m256 acc[16];
    const int R = head_dim / 8;
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
    float total = 0.0f;
    for (int p = 0; p < n_parts; ++p) {
      const float* st = stats + 2 * (p * group + h);
      const float w = st[1] * std::exp(st[0] - mx);
      total += w;
      const float* src = parts + (static_cast<int64_t>(p) * group + h) * head_dim;
      const __m256 wv = _mm256_set1_ps(w);
      for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + 8 * i), acc[i]);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    float* o = out + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < R; ++i) _mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(acc[i], inv));
  }
}

void attend_avx2_group(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
                       int group, float scale, float* og, float* scratch, float* stats) {
  auto run = [&](auto rows) {
    using E = decltype(rows);
    if (kv.head_dim == 64) attend<E, 64>(q, kv, block_table, n_ctx, kv_head, group, scale, og, scratch, stats);
    else attend<E, 128>(q, kv, block_table, n_ctx, kv_head, group, scale, og, scratch, stats);
  };
  switch (kv.dtype) {
    case kv_dtype::f16: run(f16_kv{}); break;
    case kv_dtype::q8: run(q8_kv{}); break;
    default: run(f32_kv{}); break;
  }
}

}  // namespace troupe::model::detail

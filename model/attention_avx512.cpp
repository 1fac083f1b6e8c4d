// Decode/prefill attention in the fast order with 512-bit registers. K by column (fp16, q8; see
// kv_layer_view): one load reads a value of 16 positions, which every head of the group multiplies
// by its query value (fp16: FMA; q8: VPDPBUSD on 4 values at once against the query quantized to
// int8 per 32 values, as llama.cpp scores q8_0 K). K by row (f32, and fp16 views laid out so): a
// query head stays in 4 or 8 registers, a row is widened once per chunk of 16 positions for all of
// the group's heads, and the 16 dot products come out of one transposing reduction. V is weighed
// row by row for up to 4 heads per pass.
// GCC 12 warns that the intrinsics' own _mm512_undefined_* pass-through may be used uninitialized
// (a false positive: unmasked forms ignore it), as in matmul_x16_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "model/detail/attention_avx512.hpp"
#include "model/detail/avx512_lanes.hpp"
#include "model/detail/dpbusd_bcast.hpp"
#include "model/detail/kv_prefetch.hpp"

namespace troupe::model::detail {

namespace {

constexpr int k_chunk = 16;  // positions scored together (one register of results)

// Value types: f16 and f32 values as stored; q8 codes, each row scaled by its own float
// (kScaled: V's weights are multiplied by the row's scale instead of every value).
struct f16_kv {
  using type = uint16_t;
  static constexpr bool type_is_f32 = false;
  static constexpr bool kScaled = false;
  static __m512 load16(const type* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct f32_kv {
  using type = float;
  static constexpr bool type_is_f32 = true;
  static constexpr bool kScaled = false;
  static __m512 load16(const type* p) { return _mm512_loadu_ps(p); }
};
struct q8_kv {
  using type = int8_t;
  static constexpr bool type_is_f32 = false;
  static constexpr bool kScaled = true;
  static __m512 load16(const type* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};

// Scores of n <= 16 consecutive positions whose K rows start at kp, for every head of the group,
// times scale, into scratch[h * n_ctx + pos0 ...].
template <class E, int HD>
void score_chunk(const typename E::type* kp, int n, const float* qg, int group, float scale,
                 float* scratch, int64_t n_ctx, int32_t pos0, prefetch_cursor<HD, typename E::type>& ahead) {
  constexpr int R = HD / 16;  // registers per row
  alignas(64) float widened[E::type_is_f32 ? 1 : k_chunk * HD];
  const float* rows;
  // The prefetches go one row per row read (a burst of 16 ahead of the chunk measured slower).
  if constexpr (E::type_is_f32) {
    for (int p = 0; p < n; ++p) ahead.next();
    rows = kp;
  } else {
    for (int p = 0; p < n; ++p) {
      ahead.next();
      for (int i = 0; i < R; ++i) _mm512_store_ps(widened + p * HD + 16 * i, E::load16(kp + p * HD + 16 * i));
    }
    rows = widened;
  }
  const auto mask = static_cast<__mmask16>((1u << n) - 1);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int h = 0; h < group; ++h) {
    __m512 qh[R];
    for (int i = 0; i < R; ++i) qh[i] = _mm512_loadu_ps(qg + h * HD + 16 * i);
    __m512 v[k_chunk];
    for (int p = 0; p < k_chunk; ++p) {
      if (p >= n) {
        v[p] = _mm512_setzero_ps();
        continue;
      }
      const float* r = rows + p * HD;
      __m512 s = _mm512_mul_ps(_mm512_loadu_ps(r), qh[0]);
      for (int i = 1; i < R; ++i) s = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * i), qh[i], s);
      v[p] = s;
    }
    _mm512_mask_storeu_ps(scratch + h * n_ctx + pos0, mask, _mm512_mul_ps(sum_lanes16(v), vscale));
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
// Four partial sums per head keep the FMA chains short.
template <int HD, int NH>
void score_columns_f16(const uint16_t* col, int bs, int n, const float* qh, float scale, float* dst, int64_t n_ctx) {
  constexpr int U = 4;
  const auto mask = static_cast<__mmask16>((1u << n) - 1);
  __m512 acc[NH][U];
  for (auto& a : acc)
    for (auto& r : a) r = _mm512_setzero_ps();
  for (int d = 0; d < HD; d += U) {
    for (int u = 0; u < U; ++u) {
      const uint16_t* p = col + static_cast<int64_t>(d + u) * bs;
      const __m512 k = _mm512_cvtph_ps(n == k_chunk ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                                    : _mm256_maskz_loadu_epi16(mask, p));
      for (int h = 0; h < NH; ++h) acc[h][u] = _mm512_fmadd_ps(k, _mm512_set1_ps(qh[h * HD + d + u]), acc[h][u]);
    }
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int h = 0; h < NH; ++h) {
    const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[h][0], acc[h][1]), _mm512_add_ps(acc[h][2], acc[h][3]));
    _mm512_mask_storeu_ps(dst + h * n_ctx, mask, _mm512_mul_ps(s, vscale));
  }
}

// A query head quantized as llama.cpp quantizes activations against q8_0 K: int8 codes per 32
// values with a scale each (max |x| / 127), and each block's sum of codes.
template <int HD>
struct q8_query {
  static constexpr int NB = HD / 32;
  alignas(64) int8_t qs[HD];
  float d[NB];
  int32_t sum[NB];
  // Each block as q8 K/V rows are quantized (quantize_row_q8): a non-finite block is zeros with a
  // NaN scale, so its scores come out NaN.
  void set(const float* x) {
    for (int b = 0; b < NB; ++b) {
      quantize_row_q8(x + 32 * b, 32, qs + 32 * b, &d[b]);
      int32_t s = 0;
      for (int i = 0; i < 32; ++i) s += qs[32 * b + i];
      sum[b] = s;
    }
  }
};

// Scores of n <= 16 consecutive slots of q8 K by column (col: the chunk's first slot in the first
// 4 values' column; such columns bs * 4 bytes apart; ks: the slots' row scales) for heads [0, NH)
// of qq: per block of 32 values an exact integer dot product of unsigned (code + 128) K bytes
// with the signed query codes, less 128 x the query block's sum, scaled by both scales.
// The file's one use of AVX-512 VNNI, enabled for this function alone: the fp16 and f32 paths
// also run on AVX-512 CPUs without it (paged_attention_group checks kv_q8_supported for q8).
template <int HD, int NH>
__attribute__((target("avx512vnni"))) void score_columns_q8(const uint8_t* col, const float* ks, int bs, int n, const q8_query<HD>* qq, float scale,
                      float* dst, int64_t n_ctx) {
  constexpr int NB = HD / 32;
  const auto mask = static_cast<__mmask16>((1u << n) - 1);
  __m512i acc[NH][NB];
  for (int h = 0; h < NH; ++h)
    for (int b = 0; b < NB; ++b) acc[h][b] = _mm512_set1_epi32(-128 * qq[h].sum[b]);
  // Blocks interleaved (g then b) so that NH * NB chains run side by side.
  for (int g = 0; g < 8; ++g)
    for (int b = 0; b < NB; ++b) {
      const uint8_t* p = col + static_cast<int64_t>(8 * b + g) * bs * 4;
      const __m512i k = n == k_chunk ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(mask, p);
      for (int h = 0; h < NH; ++h) acc[h][b] = dpbusd_bcast(acc[h][b], k, qq[h].qs + 32 * b + 4 * g);
    }
  const __m512 kscale = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, ks), _mm512_set1_ps(scale));
  for (int h = 0; h < NH; ++h) {
    __m512 s = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[h][0]), _mm512_set1_ps(qq[h].d[0]));
    for (int b = 1; b < NB; ++b) s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][b]), _mm512_set1_ps(qq[h].d[b]), s);
    _mm512_mask_storeu_ps(dst + h * n_ctx, mask, _mm512_mul_ps(s, kscale));
  }
}

// Calls fn(std::integral_constant<int, nh>) for nh in 1..4.
template <class F>
void with_heads(int nh, F&& fn) {
  switch (nh) {
    case 4: fn(std::integral_constant<int, 4>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    default: fn(std::integral_constant<int, 1>{}); break;
  }
}

// The scores of every head of the group over K by column, up to 4 heads per pass over the
// sequence's blocks, into scratch[h * n_ctx + pos].
template <class E, int HD>
void score_by_column(const typename E::type* K, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                     const float* qg, int group, float scale, float* scratch,
                     prefetch_cursor<HD, typename E::type>& ahead) {
  constexpr bool q8 = std::is_same_v<E, q8_kv>;
  static_assert(q8 || std::is_same_v<E, f16_kv>, "K by column is fp16 or q8");
  const int bs = kv.block_size;
  for (int h0 = 0; h0 < group; h0 += 4) {
    const int nh = std::min(4, group - h0);
    q8_query<HD> qq[4];
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
// positions, times inv[h], into out[h * HD ...]. One FMA chain per output value.
template <class E, int HD, int NH>
void weigh_values(const typename E::type* V, const kv_layer_view& kv, const int32_t* block_table, int kv_head,
                  int32_t n_ctx, const float* w, const float* inv, float* out, prefetch_cursor<HD, typename E::type>* ahead) {
  constexpr int R = HD / 16;
  __m512 acc[NH][R];
  for (auto& a : acc)
    for (auto& r : a) r = _mm512_setzero_ps();
  const int bs = kv.block_size;
  // (ahead: the walk's cursor on the first pass over V, null on the next ones)
  for (int32_t p0 = 0, b = 0; p0 < n_ctx; p0 += bs, ++b) {
    const int64_t off = kv.offset(block_table[b], kv_head, 0);
    const auto* rows = V + off;
    const float* vs = E::kScaled ? kv.v_scale + off / HD : nullptr;
    const int n = std::min(bs, n_ctx - p0);
    for (int s = 0; s < n; ++s) {
      if (ahead) ahead->next();
      __m512 v[R];
      for (int i = 0; i < R; ++i) v[i] = E::load16(rows + s * HD + 16 * i);
      for (int h = 0; h < NH; ++h) {
        float wv = w[h * static_cast<int64_t>(n_ctx) + p0 + s];
        if constexpr (E::kScaled) wv *= vs[s];
        const __m512 wh = _mm512_set1_ps(wv);
        for (int i = 0; i < R; ++i) acc[h][i] = _mm512_fmadd_ps(wh, v[i], acc[h][i]);
      }
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < R; ++i) _mm512_storeu_ps(out + h * HD + 16 * i, _mm512_mul_ps(acc[h][i], _mm512_set1_ps(inv[h])));
}

// exp(x) as cpu_ops' exp8 computes it (ggml's polynomial), 2^n applied by VSCALEFPS as ggml's
// AVX-512 version does: the same bits for x <= 0 (softmax's range), over 16 lanes.
inline __m512 exp16(__m512 x) {
  const __m512 shifter = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shifter);
  const __m512 n = _mm512_sub_ps(z, shifter);  // round(x / ln2)
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f));
  const __m512 mid = _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f));
  const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f));
  const __m512 e = _mm512_scalef_ps(_mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, mid), u, lo), n);
  // Below 2^-192 ggml gives 0 (and exp(-inf) = 0, where b above is NaN); NaN lanes stay NaN.
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~_mm512_cmp_ps_mask(n, _mm512_set1_ps(-192.0f), _CMP_LT_OQ)), e);
}

// Softmax's numerators in place: row[i] = exp(row[i] - max), and 1 / their sum (summed in 16
// float lanes, then across them); the max and the sum into stats[0], stats[1] when asked (a part
// of a split query, merged later). A NaN score makes the row's weights NaN.
float softmax_row(float* row, int32_t n, float* stats = nullptr) {
  __m512 mx = _mm512_set1_ps(row[0]);
  for (int32_t i = 0; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    mx = _mm512_mask_max_ps(mx, m, _mm512_maskz_loadu_ps(m, row + i), mx);
  }
  const __m512 sh = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int32_t i = 0; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + i), sh)));
    _mm512_mask_storeu_ps(row + i, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  const float total = _mm512_reduce_add_ps(sum);
  if (stats) {
    stats[0] = _mm512_reduce_max_ps(mx);
    stats[1] = total;
  }
  return 1.0f / total;
}

// Softmax of each head's scores in scratch, then V weighed into og, up to 4 heads per pass over V
// at head size 64 (16 accumulators), 2 at 128.
template <class E, int HD>
void weigh_all(const typename E::type* V, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
               int kv_head, int group, float* og, float* scratch, prefetch_cursor<HD, typename E::type>& ahead,
               float* stats) {
  float inv[4];
  constexpr int per_pass = HD == 64 ? 4 : 2;
  for (int h0 = 0; h0 < group; h0 += per_pass) {
    const int nh = std::min(per_pass, group - h0);
    float* w = scratch + static_cast<int64_t>(h0) * n_ctx;
    for (int h = 0; h < nh; ++h)
      inv[h] = softmax_row(w + static_cast<int64_t>(h) * n_ctx, n_ctx, stats ? stats + 2 * (h0 + h) : nullptr);
    float* o = og + static_cast<int64_t>(h0) * HD;
    auto* first = h0 == 0 ? &ahead : nullptr;
    switch (nh) {
      case 4: weigh_values<E, HD, per_pass == 4 ? 4 : 1>(V, kv, block_table, kv_head, n_ctx, w, inv, o, first); break;
      case 3: weigh_values<E, HD, 3>(V, kv, block_table, kv_head, n_ctx, w, inv, o, first); break;
      case 2: weigh_values<E, HD, 2>(V, kv, block_table, kv_head, n_ctx, w, inv, o, first); break;
      default: weigh_values<E, HD, 1>(V, kv, block_table, kv_head, n_ctx, w, inv, o, first); break;
    }
  }
}

template <class E, int HD>
void attend(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head, int group,
            float scale, float* og, float* scratch, float* stats) {
  const auto* K = static_cast<const typename E::type*>(kv.k);
  const auto* V = static_cast<const typename E::type*>(kv.v);
  const float* qg = q + static_cast<int64_t>(kv_head) * group * HD;
  // q8 K is always by column (kv_k_by_column; paged_attention_group checks), f32 K by row.
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

void quantize_row_q8(const float* x, int n, int8_t* codes, float* scale) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 amax = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  for (int i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    finite &= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_EQ_OQ);  // x - x: 0 unless NaN/inf
    amax = _mm512_max_ps(amax, _mm512_andnot_ps(sign, v));
  }
  const bool all_finite = finite == 0xFFFF;
  const float d = _mm512_reduce_max_ps(amax) / 127.0f;
  const float id = all_finite && d > 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  for (int i = 0; i < n; i += 16) {
    // rounded to nearest even, as nearbyint; |x * id| <= 127, so the saturation never acts
    const __m512i c = all_finite ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vid)) : _mm512_setzero_si512();
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtsepi32_epi8(c));
  }
  *scale = all_finite ? d : std::numeric_limits<float>::quiet_NaN();
}

void merge_parts_avx512(const float* parts, const float* stats, int n_parts, int group, int head_dim, float* out) {
  for (int h = 0; h < group; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < n_parts; ++p) mx = std::max(mx, stats[2 * (p * group + h)]);
    // Part p's outputs are normalised over its own positions: weighed by its share of the whole
    // softmax sum, sum_p * exp(max_p - max); summed part after part, 16 values at a time.
    __m512 acc[8];
    const int R = head_dim / 16;
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    float total = 0.0f;
    for (int p = 0; p < n_parts; ++p) {
      const float* st = stats + 2 * (p * group + h);
      const float w = st[1] * std::exp(st[0] - mx);
      total += w;
      const float* src = parts + (static_cast<int64_t>(p) * group + h) * head_dim;
      const __m512 wv = _mm512_set1_ps(w);
      for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src + 16 * i), acc[i]);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / total);
    float* o = out + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < R; ++i) _mm512_storeu_ps(o + 16 * i, _mm512_mul_ps(acc[i], inv));
  }
}

void attend_avx512_group(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                         int kv_head, int group, float scale, float* og, float* scratch, float* stats) {
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

// Decode/prefill attention in the fast order with 512-bit registers: a query head's 64 or 128
// values stay in 4 or 8 registers, a K row is widened once per chunk of 16 positions for all of
// the group's heads, and the 16 dot products of a chunk come out of one transposing reduction.
// GCC 12 warns that the intrinsics' own _mm512_undefined_* pass-through may be used uninitialized
// (a false positive: unmasked forms ignore it), as in matmul_x16_avx512.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "model/cpu_ops.hpp"
#include "model/detail/attention_avx512.hpp"

namespace troupe::model::detail {

namespace {

constexpr int k_chunk = 16;  // positions scored together (one register of results)

// Row types: f16 and f32 values as stored; q8 codes, each row scaled by its own float
// (kScaled: scores and weights are multiplied by the row's scale instead of every value).
struct f16_rows {
  using type = uint16_t;
  static constexpr bool type_is_f32 = false;
  static constexpr bool kScaled = false;
  static __m512 load16(const type* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct f32_rows {
  using type = float;
  static constexpr bool type_is_f32 = true;
  static constexpr bool kScaled = false;
  static __m512 load16(const type* p) { return _mm512_loadu_ps(p); }
};
struct q8_rows {
  using type = int8_t;
  static constexpr bool type_is_f32 = false;
  static constexpr bool kScaled = true;
  static __m512 load16(const type* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};

// Rows k_ahead positions on are fetched while this one is read: a KV head's rows are contiguous
// only within a block, and blocks lie anywhere in the pool, so the hardware prefetcher restarts
// at every block; one row per position (2 lines at 64 fp16 values) spreads the requests.
constexpr int32_t k_ahead = 32;

// Each line of a row of Bytes, as straight-line code (GCC 12 dropped the prefetches when they
// were written as a loop; troupe_attention_bench shows the difference).
template <size_t Off, size_t Bytes>
inline void prefetch_lines(const char* p) {
  _mm_prefetch(p + Off, _MM_HINT_T0);
  if constexpr (Off + 64 < Bytes) prefetch_lines<Off + 64, Bytes>(p);
}

template <int HD, class T>
inline void prefetch_row(const T* row) {
  prefetch_lines<0, HD * sizeof(T)>(reinterpret_cast<const char*>(row));
}

// The rows k_ahead positions past a walk over the context, one position per next(): the block and
// slot advance by counting (no division per position), and past the context nothing is fetched.
template <int HD, class T>
struct prefetch_cursor {
  const T* base;
  const kv_layer_view& kv;
  const int32_t* block_table;
  int kv_head;
  int32_t left;  // positions still ahead of the cursor
  int32_t block, slot;
  prefetch_cursor(const T* b, const kv_layer_view& v, const int32_t* bt, int h, int32_t n_ctx)
      : base(b), kv(v), block_table(bt), kv_head(h), left(n_ctx - k_ahead), block(k_ahead / v.block_size),
        slot(k_ahead % v.block_size) {}
  void next() {
    if (left <= 0) return;
    prefetch_row<HD>(base + kv.offset(block_table[block], kv_head, slot));
    --left;
    if (++slot == kv.block_size) {
      slot = 0;
      ++block;
    }
  }
};

// Lane p of the result: the sum of v[p]'s 16 lanes. Pairs, then quads, are interleaved and
// added within 128-bit lanes, then the four 128-bit partial sums are folded across lanes.
inline __m512 sum_lanes16(const __m512 (&v)[k_chunk]) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 2; ++i)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Scores of n <= 16 consecutive positions whose K rows start at kp (q8: their scales at ks),
// for every head of the group, times scale, into scratch[h * n_ctx + pos0 ...].
template <class E, int HD>
void score_chunk(const typename E::type* kp, const float* ks, int n, const float* qg, int group, float scale,
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
  __m512 vscale = _mm512_set1_ps(scale);
  if constexpr (E::kScaled) vscale = _mm512_mul_ps(vscale, _mm512_maskz_loadu_ps(mask, ks));
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

// Heads [0, NH) of w (rows of n_ctx unnormalised weights): the weighted sum of V over all
// positions, times inv[h], into out[h * HD ...]. One FMA chain per output value.
template <class E, int HD, int NH>
void weigh_values(const typename E::type* V, const kv_layer_view& kv, const int32_t* block_table, int kv_head,
                  int32_t n_ctx, const float* w, const float* inv, float* out) {
  constexpr int R = HD / 16;
  __m512 acc[NH][R];
  for (auto& a : acc)
    for (auto& r : a) r = _mm512_setzero_ps();
  const int bs = kv.block_size;
  prefetch_cursor<HD, typename E::type> ahead(V, kv, block_table, kv_head, n_ctx);
  for (int32_t p0 = 0, b = 0; p0 < n_ctx; p0 += bs, ++b) {
    const int64_t off = kv.offset(block_table[b], kv_head, 0);
    const auto* rows = V + off;
    const float* vs = E::kScaled ? kv.v_scale + off / HD : nullptr;
    const int n = std::min(bs, n_ctx - p0);
    for (int s = 0; s < n; ++s) {
      ahead.next();
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

template <class E, int HD>
void attend(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head, int group,
            float scale, float* out, float* scratch) {
  const auto* K = static_cast<const typename E::type*>(kv.k);
  const auto* V = static_cast<const typename E::type*>(kv.v);
  const float* qg = q + static_cast<int64_t>(kv_head) * group * HD;
  float* og = out + static_cast<int64_t>(kv_head) * group * HD;
  const int bs = kv.block_size;
  prefetch_cursor<HD, typename E::type> ahead(K, kv, block_table, kv_head, n_ctx);
  for (int32_t p0 = 0, b = 0; p0 < n_ctx; p0 += bs, ++b) {
    const int64_t off = kv.offset(block_table[b], kv_head, 0);
    const float* ks = E::kScaled ? kv.k_scale + off / HD : nullptr;
    const int n = std::min(bs, n_ctx - p0);
    for (int c = 0; c < n; c += k_chunk)
      score_chunk<E, HD>(K + off + static_cast<int64_t>(c) * HD, ks ? ks + c : nullptr, std::min(k_chunk, n - c), qg,
                         group, scale, scratch, n_ctx, p0 + c, ahead);
  }
  float inv[4];
  // Up to 4 heads per pass over V at head size 64 (16 accumulators), 2 at 128.
  constexpr int per_pass = HD == 64 ? 4 : 2;
  for (int h0 = 0; h0 < group; h0 += per_pass) {
    const int nh = std::min(per_pass, group - h0);
    float* w = scratch + static_cast<int64_t>(h0) * n_ctx;
    for (int h = 0; h < nh; ++h) {
      float* row = w + static_cast<int64_t>(h) * n_ctx;
      const float mx = max_value(row, n_ctx);
      inv[h] = static_cast<float>(1.0 / exp_sum(row, mx, row, n_ctx));
    }
    float* o = og + static_cast<int64_t>(h0) * HD;
    switch (nh) {
      case 4: weigh_values<E, HD, per_pass == 4 ? 4 : 1>(V, kv, block_table, kv_head, n_ctx, w, inv, o); break;
      case 3: weigh_values<E, HD, 3>(V, kv, block_table, kv_head, n_ctx, w, inv, o); break;
      case 2: weigh_values<E, HD, 2>(V, kv, block_table, kv_head, n_ctx, w, inv, o); break;
      default: weigh_values<E, HD, 1>(V, kv, block_table, kv_head, n_ctx, w, inv, o); break;
    }
  }
}

}  // namespace

void attend_avx512(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
                   int group, float scale, float* out, float* scratch) {
  auto run = [&](auto rows) {
    using E = decltype(rows);
    if (kv.head_dim == 64) attend<E, 64>(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch);
    else attend<E, 128>(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch);
  };
  switch (kv.dtype) {
    case kv_dtype::f16: run(f16_rows{}); break;
    case kv_dtype::q8: run(q8_rows{}); break;
    default: run(f32_rows{}); break;
  }
}

}  // namespace troupe::model::detail

#include "model/paged_attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/quant.hpp"

namespace troupe::model {

namespace {

constexpr int k_max_group = 16;

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Element access for the two storage types.
struct f16_elems {
  using type = uint16_t;
  static __m256 load8(const type* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float load1(const type* p) { return fp16_to_fp32(*p); }
  static void store(type* dst, const float* src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
  }
};
struct f32_elems {
  using type = float;
  static __m256 load8(const type* p) { return _mm256_loadu_ps(p); }
  static float load1(const type* p) { return *p; }
  static void store(type* dst, const float* src, int n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
};

template <class E>
void store_t(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, const float* k, const float* v) {
  const int32_t block = block_table[pos / kv.block_size];
  const int slot = pos % kv.block_size;
  auto* K = static_cast<typename E::type*>(kv.k);
  auto* V = static_cast<typename E::type*>(kv.v);
  for (int h = 0; h < kv.n_kv_heads; ++h) {
    const int64_t off = kv.offset(block, h, slot);
    E::store(K + off, k + static_cast<int64_t>(h) * kv.head_dim, kv.head_dim);
    E::store(V + off, v + static_cast<int64_t>(h) * kv.head_dim, kv.head_dim);
  }
}

template <class E>
void attend_t(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
              int group, float scale, float* out, float* scratch) {
  const int hd = kv.head_dim;
  const int bs = kv.block_size;
  const auto* K = static_cast<const typename E::type*>(kv.k);
  const auto* V = static_cast<const typename E::type*>(kv.v);
  const float* qg = q + static_cast<int64_t>(kv_head) * group * hd;
  float* og = out + static_cast<int64_t>(kv_head) * group * hd;
  const bool simd = hd % 8 == 0 && group <= k_max_group;

  // Scores: scratch[pos * group + j] = q_j . k_pos * scale
  for (int32_t pos = 0; pos < n_ctx; ++pos) {
    const auto* kp = K + kv.offset(block_table[pos / bs], kv_head, pos % bs);
    float* s = scratch + static_cast<int64_t>(pos) * group;
    if (simd) {
      __m256 acc[k_max_group];
      for (int j = 0; j < group; ++j) acc[j] = _mm256_setzero_ps();
      for (int i = 0; i < hd; i += 8) {
        const __m256 kf = E::load8(kp + i);
        for (int j = 0; j < group; ++j)
          acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + static_cast<int64_t>(j) * hd + i), kf, acc[j]);
      }
      for (int j = 0; j < group; ++j) s[j] = hsum(acc[j]) * scale;
    } else {
      for (int j = 0; j < group; ++j) {
        float d = 0.0f;
        for (int i = 0; i < hd; ++i) d += qg[static_cast<int64_t>(j) * hd + i] * E::load1(kp + i);
        s[j] = d * scale;
      }
    }
  }

  // Softmax per query head over positions.
  for (int j = 0; j < group; ++j) {
    float mx = -INFINITY;
    for (int32_t pos = 0; pos < n_ctx; ++pos) mx = std::max(mx, scratch[static_cast<int64_t>(pos) * group + j]);
    float sum = 0.0f;
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      float& e = scratch[static_cast<int64_t>(pos) * group + j];
      e = std::exp(e - mx);
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int32_t pos = 0; pos < n_ctx; ++pos) scratch[static_cast<int64_t>(pos) * group + j] *= inv;
  }

  // Weighted sum of V.
  std::fill(og, og + static_cast<int64_t>(group) * hd, 0.0f);
  for (int32_t pos = 0; pos < n_ctx; ++pos) {
    const auto* vp = V + kv.offset(block_table[pos / bs], kv_head, pos % bs);
    const float* w = scratch + static_cast<int64_t>(pos) * group;
    if (simd) {
      for (int i = 0; i < hd; i += 8) {
        const __m256 vf = E::load8(vp + i);
        for (int j = 0; j < group; ++j) {
          float* o = og + static_cast<int64_t>(j) * hd + i;
          _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(w[j]), vf, _mm256_loadu_ps(o)));
        }
      }
    } else {
      for (int j = 0; j < group; ++j)
        for (int i = 0; i < hd; ++i) og[static_cast<int64_t>(j) * hd + i] += w[j] * E::load1(vp + i);
    }
  }
}

}  // namespace

void kv_store(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, const float* k, const float* v) {
  if (kv.dtype == kv_dtype::f16) store_t<f16_elems>(kv, block_table, pos, k, v);
  else store_t<f32_elems>(kv, block_table, pos, k, v);
}

void paged_attention_group(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                           int kv_head, int group, float scale, float* out, float* scratch) {
  if (kv.dtype == kv_dtype::f16) attend_t<f16_elems>(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch);
  else attend_t<f32_elems>(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch);
}

}  // namespace troupe::model

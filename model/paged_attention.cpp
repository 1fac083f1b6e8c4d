#include "model/paged_attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

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

}  // namespace

void kv_store(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, const float* k, const float* v) {
  const int32_t block = block_table[pos / kv.block_size];
  const int slot = pos % kv.block_size;
  for (int h = 0; h < kv.n_kv_heads; ++h) {
    uint16_t* kd = kv.k_at(block, h, slot);
    uint16_t* vd = kv.v_at(block, h, slot);
    const float* ks = k + static_cast<int64_t>(h) * kv.head_dim;
    const float* vs = v + static_cast<int64_t>(h) * kv.head_dim;
    int i = 0;
    for (; i + 8 <= kv.head_dim; i += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(kd + i), _mm256_cvtps_ph(_mm256_loadu_ps(ks + i), 0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(vd + i), _mm256_cvtps_ph(_mm256_loadu_ps(vs + i), 0));
    }
    for (; i < kv.head_dim; ++i) {
      kd[i] = fp32_to_fp16(ks[i]);
      vd[i] = fp32_to_fp16(vs[i]);
    }
  }
}

void paged_attention_group(const float* q, const kv_layer_view& kv, const int32_t* block_table,
                           int32_t n_ctx, int kv_head, int group, float scale, float* out, float* scratch) {
  const int hd = kv.head_dim;
  const int bs = kv.block_size;
  const float* qg = q + static_cast<int64_t>(kv_head) * group * hd;
  float* og = out + static_cast<int64_t>(kv_head) * group * hd;
  const bool simd = hd % 8 == 0 && group <= k_max_group;

  // Scores: scratch[pos * group + j] = q_j . k_pos * scale
  for (int32_t pos = 0; pos < n_ctx; ++pos) {
    const uint16_t* kp = kv.k_at(block_table[pos / bs], kv_head, pos % bs);
    float* s = scratch + static_cast<int64_t>(pos) * group;
    if (simd) {
      __m256 acc[k_max_group];
      for (int j = 0; j < group; ++j) acc[j] = _mm256_setzero_ps();
      for (int i = 0; i < hd; i += 8) {
        __m256 kf = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kp + i)));
        for (int j = 0; j < group; ++j)
          acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + static_cast<int64_t>(j) * hd + i), kf, acc[j]);
      }
      for (int j = 0; j < group; ++j) s[j] = hsum(acc[j]) * scale;
    } else {
      for (int j = 0; j < group; ++j) {
        float d = 0.0f;
        for (int i = 0; i < hd; ++i) d += qg[static_cast<int64_t>(j) * hd + i] * fp16_to_fp32(kp[i]);
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
    const uint16_t* vp = kv.v_at(block_table[pos / bs], kv_head, pos % bs);
    const float* w = scratch + static_cast<int64_t>(pos) * group;
    if (simd) {
      for (int i = 0; i < hd; i += 8) {
        __m256 vf = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vp + i)));
        for (int j = 0; j < group; ++j) {
          float* o = og + static_cast<int64_t>(j) * hd + i;
          _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_set1_ps(w[j]), vf, _mm256_loadu_ps(o)));
        }
      }
    } else {
      for (int j = 0; j < group; ++j)
        for (int i = 0; i < hd; ++i) og[static_cast<int64_t>(j) * hd + i] += w[j] * fp16_to_fp32(vp[i]);
    }
  }
}

}  // namespace troupe::model

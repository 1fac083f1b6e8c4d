#include "model/cpu_ops.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "model/detail/avx_exp.hpp"

namespace troupe::model {

using detail::exp8;
using detail::hsum8;

float max_value(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);  // a NaN in x keeps m
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float mx = lanes[0];
  for (int l = 1; l < 8; ++l) mx = lanes[l] > mx ? lanes[l] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

int64_t argmax(const float* x, int64_t n) {
  const float mx = max_value(x, n);
  const __m256 vm = _mm256_set1_ps(mx);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
    if (hit) return i + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; i < n; ++i)
    if (x[i] == mx) return i;
  return 0;  // x[0] is NaN: std::max_element's answer too
}

double exp_sum(const float* x, float shift, float* y, int64_t n) {
  const __m256 sh = _mm256_set1_ps(shift);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // whole chunks straight from and to memory
    const __m256 lo = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    const __m256 hi = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh));
    _mm256_storeu_ps(y + i, lo);
    _mm256_storeu_ps(y + i + 8, hi);
    sum += static_cast<double>(hsum8(_mm256_add_ps(hi, lo)));
  }
  for (; i < n; i += 16) {  // the last, partial chunk: staged with -inf padding
    alignas(32) float in[16], out[16];
    const int64_t m = std::min<int64_t>(16, n - i);
    for (int64_t k = 0; k < 16; ++k) in[k] = k < m ? x[i + k] : -INFINITY;  // exp(-inf) = 0, as masked
    const __m256 lo = exp8(_mm256_sub_ps(_mm256_load_ps(in), sh));
    const __m256 hi = exp8(_mm256_sub_ps(_mm256_load_ps(in + 8), sh));
    _mm256_store_ps(out, lo);
    _mm256_store_ps(out + 8, hi);
    for (int64_t k = 0; k < m; ++k) y[i + k] = out[k];
    // a 16-lane reduction as AVX-512 does it: upper 8 + lower 8, then the 8-lane tree
    sum += static_cast<double>(hsum8(_mm256_add_ps(hi, lo)));
  }
  return sum;
}

void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
  // Squares rounded to float, summed in double: ggml's order, so that the scale is bit-identical
  // to llama.cpp's (the f32 residual stream carries outliers of ~1e4, where it shows).
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void rms_norm_fast(const float* x, const float* w, float* y, int n, float eps) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    const __m256 sa = _mm256_mul_ps(a, a), sb = _mm256_mul_ps(b, b);  // squares rounded to float
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(sa)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(sa, 1)));
    acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(sb)));
    acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(sb, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) ss += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  int j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), vs), _mm256_loadu_ps(w + j)));
  for (; j < n; ++j) y[j] = x[j] * scale * w[j];
}

void rope_table(int32_t pos, int n_rot, float base, float freq_scale, float* cos_t, float* sin_t,
                const float* freq_factors) {
  // As ggml builds it: theta starts at the position and is multiplied by base^(-2/n_rot) once per
  // pair, a running float product (not one pow per pair: that differs by a few ulps), then
  // scaled by freq_scale. gpu/kernel_math.hpp's rope_theta computes the same product. A frequency
  // factor divides the pair's angle before the scaling, as ggml's rope cache does.
  const float step = std::pow(base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int i = 0; i < n_rot / 2; ++i) {
    const float t = freq_scale * (freq_factors ? theta / freq_factors[i] : theta);
    cos_t[i] = std::cos(t);
    sin_t[i] = std::sin(t);
    theta *= step;
  }
}

void apply_rope(float* x, int n_heads, int head_dim, int n_rot, rope_style style, const float* cos_t,
                const float* sin_t) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (style == rope_style::normal) {
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_t[i] - b * sin_t[i];
        v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + half] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace troupe::model

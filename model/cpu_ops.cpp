#include "model/cpu_ops.hpp"

#include <immintrin.h>

#include <cmath>

namespace troupe::model {

void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void rope_table(int32_t pos, int n_rot, float base, float freq_scale, float* cos_t, float* sin_t) {
  for (int i = 0; i < n_rot / 2; ++i) {
    // Same formula as llama.cpp: theta = p * base^(-2i/n_rot), computed in float.
    const float theta = static_cast<float>(pos) * freq_scale *
                        std::pow(base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
    cos_t[i] = std::cos(theta);
    sin_t[i] = std::sin(theta);
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
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace troupe::model

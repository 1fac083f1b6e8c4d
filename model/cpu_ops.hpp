#pragma once
// Element-wise pieces of the transformer block on the CPU (norms, RoPE, activations).
#include <cstdint>

#include "model/architecture.hpp"

namespace troupe::model {

// y = x / rms(x) * w, for one row of n.
void rms_norm(const float* x, const float* w, float* y, int n, float eps);
// The same norm for the fast order: the squares summed in 16 double lanes instead of one chain
// (ggml's order is a single chain of n dependent additions), each token's result independent of
// the batch.
void rms_norm_fast(const float* x, const float* w, float* y, int n, float eps);

// Rotates the first n_rot dims of each of n_heads heads of size head_dim in place, using the
// cos/sin table of this token's position (n_rot / 2 entries each).
void apply_rope(float* x, int n_heads, int head_dim, int n_rot, rope_style style, const float* cos_t,
                const float* sin_t);

// Fills cos/sin tables for a position: theta_i = pos * freq_scale * base^(-2i / n_rot).
// freq_factors (n_rot / 2 divisors, a model's rope_freqs) may be null.
void rope_table(int32_t pos, int n_rot, float base, float freq_scale, float* cos_t, float* sin_t,
                const float* freq_factors = nullptr);

// gate[i] = silu(gate[i]) * up[i], with ggml's vectorised expf (the tail of n % 8 uses std::exp).
// llama.cpp's greedy choices hinge on near-ties, so the exp matches ggml's bits.
void silu_mul(float* gate, const float* up, int64_t n);

// y[i] = exp(x[i] - shift) for n values (y may be x) by ggml's vectorised expf; returns their sum
// in ggml's softmax order: float sums of 16 values at a time (zero-padded), accumulated in double.
double exp_sum(const float* x, float shift, float* y, int64_t n);

void add_inplace(float* y, const float* x, int64_t n);

// The largest of n >= 1 values (NaNs skipped unless x[0] is one), and the index of its first
// occurrence: std::max_element's answer, 8 lanes at a time (a vocabulary row per sampled token).
float max_value(const float* x, int64_t n);
int64_t argmax(const float* x, int64_t n);

}  // namespace troupe::model

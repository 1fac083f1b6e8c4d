#pragma once
// Per-element math of the CUDA kernels, written once as __host__ __device__ functions: the
// kernels in cuda_kernels.cu are thin loops around them, and host tests (tests/gpu) compile this
// header with g++ to check it against the CPU engine (model/cpu_ops, paged_attention, sampler)
// where no GPU exists. Nothing here allocates or depends on the CUDA runtime.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TROUPE_HD __host__ __device__ __forceinline__
#else
#define TROUPE_HD inline
#endif

namespace troupe::gpu::math {

// ---- fp16 storage -------------------------------------------------------------------------
// KV memory holds IEEE half bits (uint16_t on both sides). The device uses the hardware
// conversion; the host path is the same round-to-nearest-even, bit for bit.

TROUPE_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3FFu) << 13);
    }
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
#endif
}

TROUPE_HD uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (ax < 0x38800000u) {                                                // subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
#endif
}

// Splits x into two halves whose sum is x to about 2^-22 (relative): a GEMM over [hi; lo] with
// fp16 inputs and fp32 accumulation then sees f32-accurate activations, for the price of twice
// the columns (nearly free in memory-bound decode). This is what keeps greedy tokens equal to the
// f32 cpu backend's on random-weight models, whose top logits are often nearly tied.
//
// GEMM inputs saturate at the largest half (65504) instead of rounding to inf: the cpu backend
// keeps f32 activations, and an inf hi with a -inf lo would put NaN into every output of the row
// (SwiGLU outputs of some checkpoints reach the thousands). NaN stays NaN. Split, values up to
// 2 x 65504 are still exact to about 2^-11 absolute, larger ones clamp there.
TROUPE_HD float saturate_half_range(float x) {
  constexpr float k_max_half = 65504.0f;
  return x > k_max_half ? k_max_half : x < -k_max_half ? -k_max_half : x;
}

TROUPE_HD uint16_t gemm_input_half(float x) { return float_to_half(saturate_half_range(x)); }

TROUPE_HD void split_half(float x, uint16_t* hi, uint16_t* lo) {
  *hi = gemm_input_half(x);
  *lo = gemm_input_half(x - half_to_float(*hi));
}

TROUPE_HD float kv_load(const uint16_t* p) { return half_to_float(*p); }
TROUPE_HD float kv_load(const float* p) { return *p; }
TROUPE_HD void kv_put(uint16_t* p, float x) { *p = float_to_half(x); }
TROUPE_HD void kv_put(float* p, float x) { *p = x; }

// ---- RMSNorm ------------------------------------------------------------------------------
// A kernel reduces sum(x^2) over the row (in float, in a tree) and then scales each element.

TROUPE_HD float rms_scale(float sum_sq, int n, float eps) { return 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps); }
TROUPE_HD float rms_norm_elem(float x, float w, float scale) { return x * scale * w; }

// The whole row serially (what one kernel block computes, without the tree).
TROUPE_HD void rms_norm_row(const float* x, const float* w, float* y, int n, float eps) {
  float ss = 0.0f;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float s = rms_scale(ss, n, eps);
  for (int i = 0; i < n; ++i) y[i] = rms_norm_elem(x[i], w[i], s);
}

// ---- RoPE ---------------------------------------------------------------------------------

// theta_i = freq_scale * (pos * s * s * ... i times), s = base^(-2 / n_rot): the running float
// product ggml and model/cpu_ops.cpp's rope_table compute (one pow per pair differs by ulps).
TROUPE_HD float rope_theta(int32_t pos, int i, int n_rot, float base, float freq_scale) {
  const float step = powf(base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int k = 0; k < i; ++k) theta *= step;
  return freq_scale * theta;
}

// The two elements of a head that pair i (< n_rot / 2) rotates: adjacent for normal (GGUF
// llama), halves for NeoX.
TROUPE_HD void rope_pair(bool neox, int i, int n_rot, int* a, int* b) {
  if (neox) {
    *a = i;
    *b = i + n_rot / 2;
  } else {
    *a = 2 * i;
    *b = 2 * i + 1;
  }
}

// Rotates pair i of one head at a position (one thread per pair in the kernel).
TROUPE_HD void rope_rotate_pair(float* head, bool neox, int i, int n_rot, int32_t pos, float base, float freq_scale) {
  int a, b;
  rope_pair(neox, i, n_rot, &a, &b);
  const float th = rope_theta(pos, i, n_rot, base, freq_scale);
  const float c = cosf(th), s = sinf(th);
  const float x0 = head[a], x1 = head[b];
  head[a] = x0 * c - x1 * s;
  head[b] = x0 * s + x1 * c;
}

TROUPE_HD void rope_head(float* head, bool neox, int n_rot, int32_t pos, float base, float freq_scale) {
  for (int i = 0; i < n_rot / 2; ++i) rope_rotate_pair(head, neox, i, n_rot, pos, base, freq_scale);
}

// ---- SwiGLU -------------------------------------------------------------------------------

TROUPE_HD float silu_mul(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// ---- paged KV memory ----------------------------------------------------------------------
// Per layer: [block][kv_head][slot][head_dim], the CPU backend's layout (model/paged_attention),
// so block ids from the scheduler's block tables mean the same thing on both backends.

struct kv_geom {
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  TROUPE_HD int64_t block_stride() const { return static_cast<int64_t>(n_kv_heads) * block_size * head_dim; }
  // Offset of element 0 of (kv_head, position) for a sequence with this block table.
  TROUPE_HD int64_t offset(const int32_t* block_table, int32_t pos, int kv_head) const {
    const int32_t block = block_table[pos / block_size];
    const int slot = pos % block_size;
    return block * block_stride() + (static_cast<int64_t>(kv_head) * block_size + slot) * head_dim;
  }
};

// Writes element e (< n_kv_heads * head_dim) of one token's K and V at `pos`.
template <class T>
TROUPE_HD void kv_write_elem(T* K, T* V, const kv_geom& g, const int32_t* block_table, int32_t pos, int e,
                             const float* k, const float* v) {
  const int h = e / g.head_dim, d = e % g.head_dim;
  const int64_t off = g.offset(block_table, pos, h) + d;
  kv_put(K + off, k[e]);
  kv_put(V + off, v[e]);
}

// ---- attention: online softmax ------------------------------------------------------------
// One query head over positions [0, n_ctx) in one pass: running max m, running sum l, and the
// output accumulator rescaled by exp(m_old - m_new) whenever the max grows.

struct online_softmax {
  float m = -INFINITY;
  float l = 0.0f;
  // Takes score s; returns the factor to rescale the accumulator by (*c) and the weight of s (*p).
  TROUPE_HD void push(float s, float* c, float* p) {
    const float m_new = s > m ? s : m;
    *c = expf(m - m_new);  // exp(-inf) = 0 on the first push
    *p = expf(s - m_new);
    l = l * *c + *p;
    m = m_new;
  }
  // Merges another partial state (split-context decoding); returns the factors for both accumulators.
  TROUPE_HD void merge(const online_softmax& o, float* c_self, float* c_other) {
    const float m_new = o.m > m ? o.m : m;
    *c_self = m == -INFINITY ? 0.0f : expf(m - m_new);
    *c_other = o.m == -INFINITY ? 0.0f : expf(o.m - m_new);
    l = l * *c_self + o.l * *c_other;
    m = m_new;
  }
};

// Query head `q_head` (GQA: it reads kv head q_head / group). q and out point at this head's
// head_dim floats; out doubles as the accumulator. The kernel splits the dot products and the
// accumulator over a warp's lanes but runs exactly these steps.
template <class T>
TROUPE_HD void attend_head(const float* q, const T* K, const T* V, const kv_geom& g, const int32_t* block_table,
                           int32_t n_ctx, int q_head, int group, float scale, float* out) {
  const int kvh = q_head / group;
  online_softmax st;
  for (int d = 0; d < g.head_dim; ++d) out[d] = 0.0f;
  for (int32_t pos = 0; pos < n_ctx; ++pos) {
    const int64_t off = g.offset(block_table, pos, kvh);
    float s = 0.0f;
    for (int d = 0; d < g.head_dim; ++d) s += q[d] * kv_load(K + off + d);
    float c, p;
    st.push(s * scale, &c, &p);
    for (int d = 0; d < g.head_dim; ++d) out[d] = out[d] * c + p * kv_load(V + off + d);
  }
  const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
  for (int d = 0; d < g.head_dim; ++d) out[d] *= inv;
}

// ---- sampling -----------------------------------------------------------------------------
// Counter-based randomness, the sampler's (model/sampler.cpp): draw n of a request is a pure
// function of (seed, n), so a token does not depend on its batch or on the device.

TROUPE_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

TROUPE_HD double uniform01(uint64_t seed, int64_t n) {
  const uint64_t r = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(n) * 0xd1b54a32d192ed03ull);
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

// Greedy order: larger logit first, ties to the lower id (llama.cpp and model/sampler).
TROUPE_HD bool ranks_before(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }

// Argmax reduction step: keeps the better of (v, i) and (v2, i2) in (v, i).
TROUPE_HD void argmax_combine(float* v, int32_t* i, float v2, int32_t i2) {
  if (*i < 0 || (i2 >= 0 && ranks_before(v2, i2, *v, *i))) {
    *v = v2;
    *i = i2;
  }
}

// Given the kept candidates' logits in rank order (sorted[0] is the best), picks one for
// temperature t > 0, top_p, and draw u in [0, 1): the sampler's rule (min_p aside). `prob` is
// scratch of n doubles. Returns the index into `sorted`.
TROUPE_HD int pick_from_sorted(const float* sorted, int n, float temperature, float top_p, double u, double* prob) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    prob[i] = exp(static_cast<double>(sorted[i] - sorted[0]) / temperature);
    sum += prob[i];
  }
  for (int i = 0; i < n; ++i) prob[i] /= sum;
  int keep = n;
  if (top_p < 1.0f) {
    double acc = 0.0;
    keep = 0;
    while (keep < n) {
      acc += prob[keep++];
      if (acc >= top_p) break;
    }
    if (keep < 1) keep = 1;
  }
  double total = 0.0;
  for (int i = 0; i < keep; ++i) total += prob[i];
  double r = u * total;
  for (int i = 0; i < keep; ++i) {
    r -= prob[i];
    if (r < 0) return i;
  }
  return keep - 1;
}

}  // namespace troupe::gpu::math

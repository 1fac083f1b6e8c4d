#pragma once
// The CUDA kernels of the cuda backend: thin parallel loops around gpu/kernel_math.hpp, whose
// functions the host tests check against the CPU engine. Activations are f32 between kernels;
// GEMM inputs are fp16 (`uint16_t` bits), KV memory is fp16.
#include <cuda_runtime.h>

#include "gpu/kernel_math.hpp"

namespace troupe::gpu::kernels {

namespace m = troupe::gpu::math;

constexpr int k_block = 256;
constexpr int k_attn_warps = 4;
constexpr int k_max_head_dim = 256;  // 8 elements per lane
constexpr int k_per_lane = k_max_head_dim / 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  v = lane < n_warps ? part[lane] : 0.0f;
  return warp_sum(v);
}

// Writes GEMM input element i of row r: fp16 (saturated, see math::split_half), plus its low part
// split rows further down when split > 0.
__device__ __forceinline__ void put_gemm_input(uint16_t* y, int64_t row_len, int r, int i, int split, float x) {
  if (split > 0) {
    m::split_half(x, y + static_cast<int64_t>(r) * row_len + i, y + static_cast<int64_t>(split + r) * row_len + i);
  } else {
    y[static_cast<int64_t>(r) * row_len + i] = m::gemm_input_half(x);
  }
}

// y[r] = (accumulate ? y[r] : 0) + acc[r] + acc[split + r]: folds the hi and lo halves of a split GEMM. grid: rows.
__global__ void combine_kernel(const float* acc, int split, int n, float* y, bool accumulate) {
  const int64_t r = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = acc[r * n + i] + acc[(split + r) * n + i];
    y[r * n + i] = accumulate ? y[r * n + i] + v : v;
  }
}

// x[t] = embedding row of tokens[t]. grid: T.
__global__ void embed_kernel(const uint16_t* emb, const int32_t* tokens, int ne, float* x) {
  const int t = blockIdx.x;
  const uint16_t* row = emb + static_cast<int64_t>(tokens[t]) * ne;
  for (int i = threadIdx.x; i < ne; i += blockDim.x) x[static_cast<int64_t>(t) * ne + i] = m::half_to_float(row[i]);
}

// y[r] = rms_norm(x[rows ? rows[r] : r]) * w, as fp16 for the next GEMM. grid: rows.
__global__ void rms_norm_kernel(const float* x, const int32_t* rows, const float* w, uint16_t* y, int ne, float eps,
                                int split) {
  const int r = blockIdx.x;
  const float* xr = x + static_cast<int64_t>(rows ? rows[r] : r) * ne;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < ne; i += blockDim.x) ss += xr[i] * xr[i];
  const float s = m::rms_scale(block_sum(ss), ne, eps);
  for (int i = threadIdx.x; i < ne; i += blockDim.x) put_gemm_input(y, ne, r, i, split, m::rms_norm_elem(xr[i], w[i], s));
}

// qkv rows += [bq | bk | bv] (qwen2). grid: T.
__global__ void bias_kernel(float* qkv, int ld, const float* bq, const float* bk, const float* bv, int nq, int nkv) {
  float* row = qkv + static_cast<int64_t>(blockIdx.x) * ld;
  for (int i = threadIdx.x; i < nq + 2 * nkv; i += blockDim.x)
    row[i] += i < nq ? bq[i] : i < nq + nkv ? bk[i - nq] : bv[i - nq - nkv];
}

struct step_tables {
  const int32_t* pos;      // [T] position of each token
  const int32_t* seq;      // [T] index of its sequence in the step, -1 for graph padding
  const int32_t* tables;   // [n_seqs][max_blocks] block tables
  int max_blocks;
};

// RoPE on the token's Q and K heads, then its K and V into their block slot. grid: T.
__global__ void rope_store_kernel(float* qkv, int ld, step_tables st, int n_head, int n_head_kv, int n_rot, bool neox,
                                  float base, float freq_scale, uint16_t* K, uint16_t* V, m::kv_geom g) {
  const int t = blockIdx.x;
  const int s = st.seq[t];
  if (s < 0) return;  // padding: writes nothing
  const int32_t pos = st.pos[t];
  float* row = qkv + static_cast<int64_t>(t) * ld;
  const int hd = g.head_dim, half = n_rot / 2;
  const int n_pairs = (n_head + n_head_kv) * half;
  for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    const int h = i / half, j = i % half;  // heads 0..n_head-1 are Q, then the K heads follow in the row
    m::rope_rotate_pair(row + static_cast<int64_t>(h) * hd, neox, j, n_rot, pos, base, freq_scale);
  }
  __syncthreads();
  const int nq = n_head * hd, nkv = n_head_kv * hd;
  const int32_t* table = st.tables + static_cast<int64_t>(s) * st.max_blocks;
  for (int e = threadIdx.x; e < nkv; e += blockDim.x) m::kv_write_elem(K, V, g, table, pos, e, row + nq, row + nq + nkv);
}

// Attention of one query head of one token over its sequence's blocks, positions [0, pos].
// grid: (T, n_head), block: k_attn_warps warps; warp w takes positions w, w + k_attn_warps, ...
// with its own online softmax, and the warps' states merge at the end. out: [T][n_head * hd], fp16
// (split as put_gemm_input).
__global__ void attention_kernel(const float* qkv, int ld, step_tables st, const uint16_t* K, const uint16_t* V,
                                 m::kv_geom g, int n_head, int group, float scale, uint16_t* out, int split) {
  const int t = blockIdx.x, h = blockIdx.y;
  const int hd = g.head_dim;
  const int64_t nq = static_cast<int64_t>(n_head) * hd;
  const int s = st.seq[t];
  if (s < 0) {
    for (int d = threadIdx.x; d < hd; d += blockDim.x) put_gemm_input(out, nq, t, h * hd + d, split, 0.0f);
    return;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t n_ctx = st.pos[t] + 1;
  const int32_t* table = st.tables + static_cast<int64_t>(s) * st.max_blocks;
  const int kvh = h / group;
  const float* q = qkv + static_cast<int64_t>(t) * ld + static_cast<int64_t>(h) * hd;

  float qr[k_per_lane], acc[k_per_lane];
#pragma unroll
  for (int j = 0; j < k_per_lane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < hd ? q[d] : 0.0f;
    acc[j] = 0.0f;
  }
  m::online_softmax sm;
  for (int32_t p = warp; p < n_ctx; p += k_attn_warps) {
    const int64_t off = g.offset(table, p, kvh);
    float part = 0.0f;
#pragma unroll
    for (int j = 0; j < k_per_lane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) part += qr[j] * m::kv_load(K + off + d);
    }
    float c, w;
    sm.push(warp_sum(part) * scale, &c, &w);
#pragma unroll
    for (int j = 0; j < k_per_lane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) acc[j] = acc[j] * c + w * m::kv_load(V + off + d);
    }
  }

  __shared__ float s_m[k_attn_warps], s_l[k_attn_warps];
  __shared__ float s_acc[k_attn_warps][k_max_head_dim];
  if (lane == 0) {
    s_m[warp] = sm.m;
    s_l[warp] = sm.l;
  }
#pragma unroll
  for (int j = 0; j < k_per_lane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) s_acc[warp][d] = acc[j];
  }
  __syncthreads();
  if (warp != 0) return;
  m::online_softmax all;
  float tot[k_per_lane];
#pragma unroll
  for (int j = 0; j < k_per_lane; ++j) tot[j] = 0.0f;
  for (int w = 0; w < k_attn_warps; ++w) {
    m::online_softmax part;
    part.m = s_m[w];
    part.l = s_l[w];
    float c_self, c_other;
    all.merge(part, &c_self, &c_other);
#pragma unroll
    for (int j = 0; j < k_per_lane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) tot[j] = tot[j] * c_self + s_acc[w][d] * c_other;
    }
  }
  const float inv = all.l > 0.0f ? 1.0f / all.l : 0.0f;
#pragma unroll
  for (int j = 0; j < k_per_lane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) put_gemm_input(out, nq, t, h * hd + d, split, tot[j] * inv);
  }
}

// h[t] = silu(gate) * up, with gu rows [gate (n_ff) | up (n_ff)]; fp16 out. grid: T.
__global__ void swiglu_kernel(const float* gu, int n_ff, uint16_t* h, int split) {
  const int t = blockIdx.x;
  const float* row = gu + static_cast<int64_t>(t) * 2 * n_ff;
  for (int i = threadIdx.x; i < n_ff; i += blockDim.x) put_gemm_input(h, n_ff, t, i, split, m::silu_mul(row[i], row[n_ff + i]));
}

// Greedy token and its logprob per logits row. grid: rows, block: k_block.
__global__ void greedy_kernel(const float* logits, int n_vocab, int32_t* token, float* logprob) {
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  float bv = 0.0f;
  int32_t bi = -1;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) m::argmax_combine(&bv, &bi, l[i], i);
  __shared__ float s_v[k_block];
  __shared__ int32_t s_i[k_block];
  s_v[threadIdx.x] = bv;
  s_i[threadIdx.x] = bi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) m::argmax_combine(&s_v[threadIdx.x], &s_i[threadIdx.x], s_v[threadIdx.x + stride],
                                                 s_i[threadIdx.x + stride]);
    __syncthreads();
  }
  const float mx = s_v[0];
  float z = 0.0f;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) z += expf(l[i] - mx);
  z = block_sum(z);
  if (threadIdx.x == 0) {
    token[blockIdx.x] = s_i[0];
    logprob[blockIdx.x] = -logf(z);  // l[best] - (mx + log z), with l[best] == mx
  }
}

constexpr int k_max_device_top_k = 64;

struct sample_args {
  float temperature;  // > 0
  int32_t top_k;      // 1..k_max_device_top_k
  float top_p;
  uint64_t seed;
  int64_t n_generated;
};

// Temperature + top-k + top-p sampling of one logits row per block, by the cpu sampler's rule
// (min_p and penalties aside): the top_k candidates by repeated block argmax over a scratch copy
// (taken ones set to -inf), then math::pick_from_sorted with draw (seed, n_generated).
// scratch: rows x n_vocab floats. grid: rows, block: k_block.
__global__ void sample_topk_kernel(const float* logits, float* scratch, int n_vocab, const sample_args* args,
                                   int32_t* token, float* logprob) {
  const sample_args a = args[blockIdx.x];
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * n_vocab;
  float* c = scratch + static_cast<int64_t>(blockIdx.x) * n_vocab;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) c[i] = l[i];
  __shared__ float s_v[k_block];
  __shared__ int32_t s_i[k_block];
  __shared__ float top_v[k_max_device_top_k];
  __shared__ int32_t top_i[k_max_device_top_k];
  __shared__ double prob[k_max_device_top_k];
  __shared__ int n_top;
  const int k = a.top_k < n_vocab ? a.top_k : n_vocab;
  if (threadIdx.x == 0) n_top = 0;
  __syncthreads();
  for (int r = 0; r < k; ++r) {
    float bv = 0.0f;
    int32_t bi = -1;
    for (int i = threadIdx.x; i < n_vocab; i += blockDim.x)
      if (c[i] != -INFINITY) m::argmax_combine(&bv, &bi, c[i], i);
    s_v[threadIdx.x] = bv;
    s_i[threadIdx.x] = bi;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride)
        m::argmax_combine(&s_v[threadIdx.x], &s_i[threadIdx.x], s_v[threadIdx.x + stride], s_i[threadIdx.x + stride]);
      __syncthreads();
    }
    // Fewer than k finite logits (the rest -inf): the candidates end here. Every thread reads
    // s_i[0] before thread 0 can change it, so the break is uniform.
    if (s_i[0] < 0) break;
    __syncthreads();
    if (threadIdx.x == 0) {
      top_v[r] = s_v[0];
      top_i[r] = s_i[0];
      c[s_i[0]] = -INFINITY;
      n_top = r + 1;
    }
    __syncthreads();
  }
  if (n_top == 0) {  // every logit -inf: nothing to draw from
    if (threadIdx.x == 0) {
      token[blockIdx.x] = -1;
      logprob[blockIdx.x] = -INFINITY;
    }
    return;
  }
  const float mx = top_v[0];
  float z = 0.0f;
  for (int i = threadIdx.x; i < n_vocab; i += blockDim.x) z += expf(l[i] - mx);
  z = block_sum(z);
  if (threadIdx.x == 0) {
    const int pick = m::pick_from_sorted(top_v, n_top, a.temperature, a.top_p, m::uniform01(a.seed, a.n_generated), prob);
    token[blockIdx.x] = top_i[pick];
    logprob[blockIdx.x] = top_v[pick] - mx - logf(z);
  }
}

}  // namespace troupe::gpu::kernels

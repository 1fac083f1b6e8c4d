#include "gpu/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "gpu/cuda_kernels.cuh"
#include "model/quant.hpp"

namespace troupe::gpu {

namespace {

using model::backend_options;
using model::hparams;
using model::llama_model;
using model::weight_view;

constexpr int k_max_bucket = 256;

std::string cuda_msg(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

// Device memory (or, Pinned, page-locked host memory, which copies use truly asynchronously)
// owned by one pointer, freed on destruction.
template <class T, bool Pinned>
struct cuda_array {
  T* p = nullptr;
  size_t n = 0;
  cuda_array() = default;
  cuda_array(const cuda_array&) = delete;
  cuda_array& operator=(const cuda_array&) = delete;
  cuda_array(cuda_array&& o) noexcept : p(o.p), n(o.n) {
    o.p = nullptr;
    o.n = 0;
  }
  ~cuda_array() { reset(); }
  void reset() {
    if (p) Pinned ? cudaFreeHost(p) : cudaFree(p);
    p = nullptr;
    n = 0;
  }
  cudaError_t alloc(size_t count) {
    reset();
    if (count == 0) return cudaSuccess;
    void** where = reinterpret_cast<void**>(&p);
    cudaError_t e = Pinned ? cudaMallocHost(where, count * sizeof(T)) : cudaMalloc(where, count * sizeof(T));
    if (e == cudaSuccess) n = count;
    return e;
  }
  // Grows (contents lost) when smaller than count.
  cudaError_t reserve(size_t count) { return n >= count ? cudaSuccess : alloc(count); }
};
template <class T>
using dev_array = cuda_array<T, false>;
template <class T>
using pinned_array = cuda_array<T, true>;

// Per-step device buffers. The eager set grows on demand; the graph set is sized once for the
// largest bucket, because captured graphs hold its pointers.
struct step_buffers {
  dev_array<int32_t> tokens, pos, seq, rows, tables;
  dev_array<float> x, qkv, gu, logits, logprob, acc;
  dev_array<uint16_t> xn, att, h, xo;  // GEMM inputs: 2 x rows (hi, lo) for split activations
  dev_array<int32_t> greedy;
  size_t cap_t = 0, cap_out = 0, cap_tab = 0;

  cudaError_t reserve(const hparams& hp, size_t T, size_t n_out, size_t n_tab) {
    cudaError_t e = cudaSuccess;
    auto take = [&](cudaError_t r) {
      if (e == cudaSuccess) e = r;
    };
    if (T > cap_t) {
      const size_t ne = hp.n_embd, nqkv = hp.n_q_dim() + 2 * hp.n_kv_dim();
      take(tokens.alloc(T));
      take(pos.alloc(T));
      take(seq.alloc(T));
      take(x.alloc(T * ne));
      take(xn.alloc(2 * T * ne));
      take(qkv.alloc(T * nqkv));
      take(att.alloc(2 * T * hp.n_q_dim()));
      take(gu.alloc(T * 2 * hp.n_ff));
      take(h.alloc(2 * T * hp.n_ff));
      cap_t = T;
    }
    if (n_out > cap_out) {
      take(rows.alloc(n_out));
      take(xo.alloc(2 * n_out * hp.n_embd));
      take(logits.alloc(n_out * hp.n_vocab));
      take(greedy.alloc(n_out));
      take(logprob.alloc(n_out));
      cap_out = n_out;
    }
    // Split-GEMM outputs before their halves are folded: the widest projection or the head.
    const size_t wide = std::max<size_t>({static_cast<size_t>(hp.n_q_dim() + 2 * hp.n_kv_dim()),
                                          static_cast<size_t>(2 * hp.n_ff), static_cast<size_t>(hp.n_embd)});
    take(acc.reserve(std::max(2 * cap_t * wide, 2 * cap_out * static_cast<size_t>(hp.n_vocab))));
    if (n_tab > cap_tab) {
      take(tables.alloc(n_tab));
      cap_tab = n_tab;
    }
    return e;
  }
};

struct layer_dev {
  dev_array<float> attn_norm, ffn_norm, bq, bk, bv;
  dev_array<uint16_t> wqkv, wo, wgu, wdown;  // fp16, row-major [n_out][n_in]; QKV and gate|up stacked
};

}  // namespace

struct cuda_backend::impl {
  std::shared_ptr<llama_model> model;
  cuda_options copt;
  int32_t block_size = 16;
  int32_t n_blocks = 0;
  int32_t graph_max_blocks = 0;  // block-table stride of graph steps: the context in blocks
  math::kv_geom geom;

  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cudaEvent_t ev_start = nullptr, ev_stop = nullptr;
  dev_array<uint8_t> blas_ws;

  dev_array<uint16_t> tok_embd, output;  // output empty when tied
  dev_array<float> output_norm;
  std::vector<layer_dev> layers;
  dev_array<uint16_t> k_cache, v_cache;  // [layer][block][kv_head][slot][head_dim]

  step_buffers eager, graph_buf;
  // (bucket, block-table stride) -> captured decode step; see graph_stride().
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs;
  bool graph_ready = false;
  std::string graph_error;  // why graphs were turned off, when a capture failed

  // Last step, for greedy_last().
  step_buffers* last_buf = nullptr;
  int last_rows = 0;
  cuda_step_timing timing;

  // Pinned host staging: step inputs, sampling arguments, sampled ids and logprobs.
  pinned_array<int32_t> h_in, h_tok;
  pinned_array<float> h_lp;
  pinned_array<kernels::sample_args> h_args;
  dev_array<kernels::sample_args> d_args;

  ~impl() {
    if (stream) cudaSetDevice(copt.device);
    for (auto& [key, g] : graphs) cudaGraphExecDestroy(g);
    if (ev_start) cudaEventDestroy(ev_start);
    if (ev_stop) cudaEventDestroy(ev_stop);
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }

  const hparams& hp() const { return model->params(); }
  uint16_t* layer_k(int il) { return k_cache.p + static_cast<size_t>(il) * n_blocks * geom.block_stride(); }
  uint16_t* layer_v(int il) { return v_cache.p + static_cast<size_t>(il) * n_blocks * geom.block_stride(); }

  status upload_matrices(const std::vector<const weight_view*>& parts, dev_array<uint16_t>& dst);
  status upload_vec(const float* src, int64_t n, dev_array<float>& dst);
  status load_weights();
  status gemm(const uint16_t* w, int n_out, int n_in, const uint16_t* x, int T, float* y, float beta);
  status linear(step_buffers& sb, const uint16_t* w, int n_out, int n_in, const uint16_t* x, int T, float* y,
                bool accumulate);
  status enqueue_step(step_buffers& sb, int T, int n_out, int max_blocks);
  int graph_stride(size_t max_blocks) const;
  status ensure_graph(int bucket, int stride);
  // The device is per host thread: every entry point selects it (a no-op when already current).
  status use_device() const;
  // Copies rows' sampled ids and logprobs (sb.greedy, sb.logprob) back through pinned memory.
  result<std::vector<model::token_logprob>> copy_back_samples(step_buffers& sb, int rows);
};

namespace {

#define TROUPE_CUDA_TRY(expr)                                   \
  do {                                                          \
    cudaError_t e_ = (expr);                                    \
    if (e_ != cudaSuccess) return make_error(cuda_msg(#expr, e_)); \
  } while (0)

}  // namespace

status cuda_backend::impl::upload_vec(const float* src, int64_t n, dev_array<float>& dst) {
  TROUPE_CUDA_TRY(dst.alloc(static_cast<size_t>(n)));
  TROUPE_CUDA_TRY(cudaMemcpy(dst.p, src, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
  return {};
}

// Dequantizes with the engine's own dequantize_row (so both backends start from the same
// numbers), rounds to fp16 and uploads the row-stacked parts in chunks.
status cuda_backend::impl::upload_matrices(const std::vector<const weight_view*>& parts, dev_array<uint16_t>& dst) {
  const int64_t n_in = parts[0]->n_in;
  int64_t rows = 0;
  for (const auto* w : parts) {
    if (w->n_in != n_in) return make_error("stacked matrices differ in width");
    rows += w->n_out;
  }
  TROUPE_CUDA_TRY(dst.alloc(static_cast<size_t>(rows * n_in)));
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{16} << 20) / n_in);
  std::vector<float> f(static_cast<size_t>(n_in));
  std::vector<uint16_t> h(static_cast<size_t>(chunk_rows * n_in));
  int64_t done = 0;
  for (const auto* w : parts) {
    for (int64_t r0 = 0; r0 < w->n_out; r0 += chunk_rows) {
      const int64_t r1 = std::min(w->n_out, r0 + chunk_rows);
      for (int64_t r = r0; r < r1; ++r) {
        model::dequantize_row(w->type, static_cast<const uint8_t*>(w->data) + static_cast<size_t>(r) * w->row_stride,
                              f.data(), n_in);
        uint16_t* out = h.data() + (r - r0) * n_in;
        for (int64_t i = 0; i < n_in; ++i) out[i] = model::fp32_to_fp16(f[static_cast<size_t>(i)]);
      }
      TROUPE_CUDA_TRY(cudaMemcpy(dst.p + (done + r0) * n_in, h.data(), static_cast<size_t>((r1 - r0) * n_in) * 2,
                                 cudaMemcpyHostToDevice));
    }
    done += w->n_out;
  }
  return {};
}

status cuda_backend::impl::load_weights() {
  const auto& p = hp();
  if (auto s = upload_matrices({&model->token_embd()}, tok_embd); !s) return s;
  // Matrices of a type without kernels as the model's Q8_0 copies (llama_model.hpp).
  if (auto s = model->prepare_matmul_weights(); !s) return s;
  if (!p.tied_output)
    if (auto s = upload_matrices({&model->matmul_output()}, output); !s) return s;
  if (auto s = upload_vec(model->output_norm(), p.n_embd, output_norm); !s) return s;
  layers.resize(static_cast<size_t>(p.n_layer));
  for (int il = 0; il < p.n_layer; ++il) {
    const auto& L = model->matmul_layers()[static_cast<size_t>(il)];
    auto& D = layers[static_cast<size_t>(il)];
    status s;
    if (s = upload_vec(L.attn_norm, p.n_embd, D.attn_norm); !s) return s;
    if (s = upload_vec(L.ffn_norm, p.n_embd, D.ffn_norm); !s) return s;
    if (p.qkv_bias) {
      if (s = upload_vec(L.bq, p.n_q_dim(), D.bq); !s) return s;
      if (s = upload_vec(L.bk, p.n_kv_dim(), D.bk); !s) return s;
      if (s = upload_vec(L.bv, p.n_kv_dim(), D.bv); !s) return s;
    }
    if (s = upload_matrices({&L.wq, &L.wk, &L.wv}, D.wqkv); !s) return s;
    if (s = upload_matrices({&L.wo}, D.wo); !s) return s;
    if (s = upload_matrices({&L.w_gate, &L.w_up}, D.wgu); !s) return s;
    if (s = upload_matrices({&L.w_down}, D.wdown); !s) return s;
  }
  return {};
}

// y[T][n_out] (row-major, f32) = x[T][n_in] (fp16) * w[n_out][n_in]^T (fp16) + beta * y.
// Column-major view for cuBLAS: y^T = w * x^T, i.e. op(A) = W^T with A = w as [n_in x n_out].
status cuda_backend::impl::gemm(const uint16_t* w, int n_out, int n_in, const uint16_t* x, int T, float* y,
                                float beta) {
  const float alpha = 1.0f;
  const cublasStatus_t st =
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, T, n_in, &alpha, w, CUDA_R_16F, n_in, x, CUDA_R_16F, n_in,
                   &beta, y, CUDA_R_32F, n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return make_error("cublasGemmEx failed with status " + std::to_string(int(st)));
  return {};
}

// y[T][n_out] = x * w^T (+ y when accumulating), over split activations when they are on.
status cuda_backend::impl::linear(step_buffers& sb, const uint16_t* w, int n_out, int n_in, const uint16_t* x, int T,
                                  float* y, bool accumulate) {
  if (!copt.split_activations) return gemm(w, n_out, n_in, x, T, y, accumulate ? 1.0f : 0.0f);
  if (auto s = gemm(w, n_out, n_in, x, 2 * T, sb.acc.p, 0.0f); !s) return s;
  kernels::combine_kernel<<<T, kernels::k_block, 0, stream>>>(sb.acc.p, T, n_out, y, accumulate);
  return {};
}

// Enqueues one step on `stream` for inputs already in sb (tokens, pos, seq, rows, tables).
// Nothing here synchronizes or allocates, so the same code is what graphs capture.
status cuda_backend::impl::enqueue_step(step_buffers& sb, int T, int n_out, int max_blocks) {
  namespace k = kernels;
  const auto& p = hp();
  const int ne = p.n_embd, nq = p.n_q_dim(), nkv = p.n_kv_dim(), nff = p.n_ff;
  const int ld = nq + 2 * nkv;
  const k::step_tables st{sb.pos.p, sb.seq.p, sb.tables.p, max_blocks};
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const int group = p.n_head / p.n_head_kv;
  const int split = copt.split_activations ? T : 0;
  const int split_out = copt.split_activations ? n_out : 0;

  k::embed_kernel<<<T, k::k_block, 0, stream>>>(tok_embd.p, sb.tokens.p, ne, sb.x.p);
  for (int il = 0; il < p.n_layer; ++il) {
    auto& L = layers[static_cast<size_t>(il)];
    k::rms_norm_kernel<<<T, k::k_block, 0, stream>>>(sb.x.p, nullptr, L.attn_norm.p, sb.xn.p, ne, p.rms_eps, split);
    if (auto s = linear(sb, L.wqkv.p, ld, ne, sb.xn.p, T, sb.qkv.p, false); !s) return s;
    if (p.qkv_bias) k::bias_kernel<<<T, k::k_block, 0, stream>>>(sb.qkv.p, ld, L.bq.p, L.bk.p, L.bv.p, nq, nkv);
    k::rope_store_kernel<<<T, k::k_block, 0, stream>>>(sb.qkv.p, ld, st, p.n_head, p.n_head_kv, p.n_rot,
                                                       p.rope == model::rope_style::neox, p.rope_freq_base,
                                                       p.rope_freq_scale, layer_k(il), layer_v(il), geom);
    k::attention_kernel<<<dim3(T, p.n_head), 32 * k::k_attn_warps, 0, stream>>>(
        sb.qkv.p, ld, st, layer_k(il), layer_v(il), geom, p.n_head, group, scale, sb.att.p, split);
    if (auto s = linear(sb, L.wo.p, ne, nq, sb.att.p, T, sb.x.p, true); !s) return s;  // + residual
    k::rms_norm_kernel<<<T, k::k_block, 0, stream>>>(sb.x.p, nullptr, L.ffn_norm.p, sb.xn.p, ne, p.rms_eps, split);
    if (auto s = linear(sb, L.wgu.p, 2 * nff, ne, sb.xn.p, T, sb.gu.p, false); !s) return s;
    k::swiglu_kernel<<<T, k::k_block, 0, stream>>>(sb.gu.p, nff, sb.h.p, split);
    if (auto s = linear(sb, L.wdown.p, ne, nff, sb.h.p, T, sb.x.p, true); !s) return s;  // + residual
  }
  if (n_out > 0) {
    k::rms_norm_kernel<<<n_out, k::k_block, 0, stream>>>(sb.x.p, sb.rows.p, output_norm.p, sb.xo.p, ne, p.rms_eps,
                                                         split_out);
    const uint16_t* head = p.tied_output ? tok_embd.p : output.p;
    if (auto s = linear(sb, head, p.n_vocab, ne, sb.xo.p, n_out, sb.logits.p, false); !s) return s;
  }
  TROUPE_CUDA_TRY(cudaGetLastError());
  return {};
}

status cuda_backend::impl::use_device() const {
  TROUPE_CUDA_TRY(cudaSetDevice(copt.device));
  return {};
}

// Graph steps lay block tables out with a stride of the next power of two at or above the step's
// longest table (at least 8 blocks, at most the context): a step copies tables of the size its
// sequences need, not of the whole context, for at most log2(context) graphs per bucket.
int cuda_backend::impl::graph_stride(size_t max_blocks) const {
  int s = 8;
  while (static_cast<size_t>(s) < max_blocks) s *= 2;
  return std::min(s, graph_max_blocks);
}

status cuda_backend::impl::ensure_graph(int bucket, int stride) {
  if (graphs.count({bucket, stride})) return {};
  const auto& p = hp();
  TROUPE_CUDA_TRY(graph_buf.reserve(p, k_max_bucket, k_max_bucket, static_cast<size_t>(k_max_bucket) * graph_max_blocks));
  if (!graph_ready) {
    std::vector<int32_t> rows(k_max_bucket);
    for (int i = 0; i < k_max_bucket; ++i) rows[static_cast<size_t>(i)] = i;
    TROUPE_CUDA_TRY(cudaMemcpyAsync(graph_buf.rows.p, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice, stream));
    TROUPE_CUDA_TRY(cudaStreamSynchronize(stream));
    graph_ready = true;
  }
  cudaGraph_t g = nullptr;
  TROUPE_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const status s = enqueue_step(graph_buf, bucket, bucket, stride);
  const cudaError_t e = cudaStreamEndCapture(stream, &g);
  if (!s) {
    if (g) cudaGraphDestroy(g);
    return s;
  }
  TROUPE_CUDA_TRY(e);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  TROUPE_CUDA_TRY(ie);
  graphs[{bucket, stride}] = exec;
  return {};
}

int decode_bucket(int n_seqs) {
  int b = 1;
  while (b < n_seqs) b *= 2;
  return b <= k_max_bucket ? b : 0;
}

cuda_backend::cuda_backend(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
cuda_backend::~cuda_backend() = default;

const hparams& cuda_backend::params() const { return impl_->hp(); }
int32_t cuda_backend::n_blocks() const { return impl_->n_blocks; }
int32_t cuda_backend::block_size() const { return impl_->block_size; }
size_t cuda_backend::kv_bytes_per_token() const {
  const auto& p = impl_->hp();
  return static_cast<size_t>(p.n_kv_dim()) * p.n_layer * 2 * 2;
}
void cuda_backend::set_graphs(bool on) { impl_->copt.graphs = on; }
const std::string& cuda_backend::graph_error() const { return impl_->graph_error; }
const cuda_step_timing& cuda_backend::last_timing() const { return impl_->timing; }

result<std::unique_ptr<cuda_backend>> cuda_backend::create(std::shared_ptr<llama_model> m, const backend_options& o,
                                                           const cuda_options& c) {
  int n_dev = 0;
  const cudaError_t de = cudaGetDeviceCount(&n_dev);
  if (de != cudaSuccess) return make_error(std::string("no CUDA device: ") + cudaGetErrorString(de));
  if (n_dev == 0) return make_error("no CUDA device: the runtime reports 0 devices");
  if (c.device < 0 || c.device >= n_dev)
    return make_error("CUDA device " + std::to_string(c.device) + " does not exist (" + std::to_string(n_dev) +
                      " present)");
  if (o.block_size <= 0 || o.block_size > 1024) return make_error("kv block size must be in 1..1024");
  if (o.kv_f32 || o.kv_q8)
    return make_error("the cuda backend keeps KV memory in fp16 only (set kv.f32 and kv.q8 off)");
  if (m->rope_freq_factors())
    return make_error("the model has rope frequency factors (rope_freqs.weight, Llama 3.1 and later): the cpu "
                      "backend computes them, the cuda backend not yet");
  const auto& hp = m->params();
  if (hp.head_dim > kernels::k_max_head_dim)
    return make_error("the cuda backend supports head sizes up to " + std::to_string(kernels::k_max_head_dim) +
                      ", model has " + std::to_string(hp.head_dim));

  auto p = std::make_unique<impl>();
  p->model = std::move(m);
  p->copt = c;
  p->block_size = o.block_size;
  const size_t per_block = static_cast<size_t>(o.block_size) * hp.n_kv_dim() * hp.n_layer * 2 * 2;
  const auto n_blocks = static_cast<int64_t>(static_cast<size_t>(o.kv_bytes) / per_block);
  if (n_blocks < 1)
    return make_error("kv memory budget of " + std::to_string(o.kv_bytes) + " bytes holds no block of " +
                      std::to_string(per_block) + " bytes");
  if (n_blocks > (int64_t{1} << 30)) return make_error("kv memory budget too large");
  p->n_blocks = static_cast<int32_t>(n_blocks);
  p->geom = {hp.n_head_kv, hp.head_dim, o.block_size};
  p->graph_max_blocks =
      static_cast<int32_t>(std::min<int64_t>((hp.n_ctx_train + o.block_size - 1) / o.block_size, n_blocks));

  TROUPE_CUDA_TRY(cudaSetDevice(c.device));
  TROUPE_CUDA_TRY(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
  TROUPE_CUDA_TRY(cudaEventCreate(&p->ev_start));
  TROUPE_CUDA_TRY(cudaEventCreate(&p->ev_stop));
  if (cublasCreate(&p->blas) != CUBLAS_STATUS_SUCCESS) return make_error("cublasCreate failed");
  cublasSetStream(p->blas, p->stream);
  // A fixed workspace keeps cuBLAS from allocating inside graph capture.
  TROUPE_CUDA_TRY(p->blas_ws.alloc(size_t{32} << 20));
  cublasSetWorkspace(p->blas, p->blas_ws.p, p->blas_ws.n);

  if (auto s = p->load_weights(); !s) return make_error("uploading weights: " + s.error());
  const size_t kv_elems = static_cast<size_t>(p->n_blocks) * p->geom.block_stride() * hp.n_layer;
  TROUPE_CUDA_TRY(p->k_cache.alloc(kv_elems));
  TROUPE_CUDA_TRY(p->v_cache.alloc(kv_elems));
  TROUPE_CUDA_TRY(cudaMemset(p->k_cache.p, 0, kv_elems * 2));
  TROUPE_CUDA_TRY(cudaMemset(p->v_cache.p, 0, kv_elems * 2));
  // The uploads and memsets ran on the legacy default stream, which the non-blocking compute
  // stream does not wait for (and cudaMemset returns before it is done): finish them here.
  TROUPE_CUDA_TRY(cudaDeviceSynchronize());
  return std::unique_ptr<cuda_backend>(new cuda_backend(std::move(p)));
}

result<model::batch_logits> cuda_backend::forward(const model::batch& b) { return run_step(b, true); }

bool cuda_backend::can_sample(const model::sampling_params& p) const {
  if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f || p.min_p > 0.0f ||
      p.n_logprobs > 0 || !p.logit_bias.empty())
    return false;
  return p.temperature <= 0.0f || (p.top_k >= 1 && p.top_k <= kernels::k_max_device_top_k);
}

result<std::vector<model::token_logprob>> cuda_backend::forward_sampled(const model::batch& b,
                                                                        const std::vector<model::row_sampling>& rows) {
  auto step = run_step(b, false);
  if (!step) return make_error(step.error());
  std::vector<model::sampling_params> ps;
  std::vector<int64_t> n_generated;
  for (const auto& r : rows) {
    ps.push_back(r.params);
    n_generated.push_back(r.n_generated);
  }
  return sample_last(ps, n_generated);
}

result<model::batch_logits> cuda_backend::run_step(const model::batch& b, bool copy_logits) {
  auto& I = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (auto s = model::validate_batch(b, *this); !s) return make_error(s.error());
  // Its kernels compute the output head for one row per sequence; speculative verification
  // (several rows) is cpu-only for now.
  for (const auto& s : b.seqs)
    if (s.want_logits && s.n_logits != 1)
      return make_error("sequence " + std::to_string(s.seq_id) + ": n_logits " + std::to_string(s.n_logits) +
                        ": the cuda backend returns the logits of one position per sequence (speculative decoding "
                        "needs the cpu backend)");
  if (auto s = I.use_device(); !s) return make_error(s.error());
  const auto& p = I.hp();
  model::batch_logits out;
  out.n_vocab = p.n_vocab;
  const int T = b.n_tokens();
  if (T == 0) return out;

  bool all_decode = true;
  size_t max_blocks = 1;
  for (const auto& s : b.seqs) {
    all_decode = all_decode && s.tokens.size() == 1 && s.want_logits;
    max_blocks = std::max(max_blocks, s.block_table.size());
  }
  const int n_seqs = static_cast<int>(b.seqs.size());
  const int bucket = decode_bucket(n_seqs);
  bool use_graph = I.copt.graphs && all_decode && bucket > 0 && static_cast<int64_t>(max_blocks) <= I.graph_max_blocks;
  const int graph_stride = I.graph_stride(max_blocks);
  if (use_graph)
    if (auto s = I.ensure_graph(bucket, graph_stride); !s) {
      // Serving goes on eagerly; graph_error() says why (the GPU check prints it).
      I.graph_error = "capturing the decode graph of bucket " + std::to_string(bucket) + ": " + s.error();
      I.copt.graphs = false;
      use_graph = false;
      cudaGetLastError();  // a failed capture's error is not this step's
    }

  // Inputs, laid out in one pinned buffer: tokens, pos, seq, rows, tables.
  const int T_run = use_graph ? bucket : T;
  const int stride = use_graph ? graph_stride : static_cast<int>(max_blocks);
  int n_out = 0;
  for (const auto& s : b.seqs)
    if (s.want_logits) ++n_out;
  const int n_out_run = use_graph ? bucket : n_out;
  const size_t n_tab = static_cast<size_t>(use_graph ? bucket : n_seqs) * stride;
  const size_t n_in = static_cast<size_t>(3) * T_run + n_out_run + n_tab;
  if (cudaError_t e = I.h_in.reserve(n_in); e != cudaSuccess) return make_error(cuda_msg("staging step inputs", e));
  int32_t* tok = I.h_in.p;
  int32_t* pos = tok + T_run;
  int32_t* seq = pos + T_run;
  int32_t* rws = seq + T_run;
  int32_t* tab = rws + n_out_run;
  std::fill(I.h_in.p, I.h_in.p + n_in, 0);
  {
    int t = 0, r = 0;
    for (int si = 0; si < n_seqs; ++si) {
      const auto& s = b.seqs[static_cast<size_t>(si)];
      for (size_t j = 0; j < s.tokens.size(); ++j, ++t) {
        tok[t] = s.tokens[j];
        pos[t] = s.n_past + static_cast<int32_t>(j);
        seq[t] = si;
      }
      if (s.want_logits) {
        rws[r++] = t - 1;
        out.seq_ids.push_back(s.seq_id);
      }
      std::copy(s.block_table.begin(), s.block_table.end(), tab + static_cast<size_t>(si) * stride);
    }
    for (; t < T_run; ++t) seq[t] = -1;  // graph padding
    for (; r < n_out_run; ++r) rws[r] = r;
  }

  step_buffers& sb = use_graph ? I.graph_buf : I.eager;
  if (!use_graph)
    if (cudaError_t e = sb.reserve(p, static_cast<size_t>(T), static_cast<size_t>(std::max(n_out, 1)), n_tab);
        e != cudaSuccess)
      return make_error(cuda_msg("allocating step buffers", e));
  auto h2d = [&](int32_t* dst, const int32_t* src, size_t n) {
    return n ? cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyHostToDevice, I.stream) : cudaSuccess;
  };
  if (cudaEventRecord(I.ev_start, I.stream) != cudaSuccess || h2d(sb.tokens.p, tok, T_run) != cudaSuccess ||
      h2d(sb.pos.p, pos, T_run) != cudaSuccess || h2d(sb.seq.p, seq, T_run) != cudaSuccess ||
      (!use_graph && h2d(sb.rows.p, rws, n_out_run) != cudaSuccess) || h2d(sb.tables.p, tab, n_tab) != cudaSuccess)
    return make_error(cuda_msg("copying step inputs", cudaGetLastError()));

  if (use_graph) {
    if (cudaError_t e = cudaGraphLaunch(I.graphs[{bucket, graph_stride}], I.stream); e != cudaSuccess)
      return make_error(cuda_msg("cudaGraphLaunch", e));
  } else {
    if (auto s = I.enqueue_step(sb, T, n_out, static_cast<int>(max_blocks)); !s) return make_error(s.error());
  }
  if (copy_logits) out.data.resize(static_cast<size_t>(n_out) * p.n_vocab);
  if (copy_logits && n_out > 0 && cudaMemcpyAsync(out.data.data(), sb.logits.p, out.data.size() * 4, cudaMemcpyDeviceToHost,
                                   I.stream) != cudaSuccess)
    return make_error(cuda_msg("copying logits", cudaGetLastError()));
  cudaEventRecord(I.ev_stop, I.stream);
  if (cudaError_t e = cudaStreamSynchronize(I.stream); e != cudaSuccess) return make_error(cuda_msg("step", e));

  float dev_ms = 0.0f;
  cudaEventElapsedTime(&dev_ms, I.ev_start, I.ev_stop);
  I.last_buf = &sb;
  I.last_rows = n_out;
  I.timing.device_ms = dev_ms;
  I.timing.graph = use_graph;
  I.timing.bucket = use_graph ? bucket : 0;
  I.timing.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

result<std::vector<model::token_logprob>> cuda_backend::impl::copy_back_samples(step_buffers& sb, int rows) {
  TROUPE_CUDA_TRY(cudaGetLastError());  // the sampling kernel's launch
  TROUPE_CUDA_TRY(h_tok.reserve(static_cast<size_t>(rows)));
  TROUPE_CUDA_TRY(h_lp.reserve(static_cast<size_t>(rows)));
  TROUPE_CUDA_TRY(cudaMemcpyAsync(h_tok.p, sb.greedy.p, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost, stream));
  TROUPE_CUDA_TRY(cudaMemcpyAsync(h_lp.p, sb.logprob.p, static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost, stream));
  TROUPE_CUDA_TRY(cudaStreamSynchronize(stream));
  // A row with no finite logit comes back as token -1: the scheduler fails that sequence alone.
  std::vector<model::token_logprob> out;
  for (int i = 0; i < rows; ++i) out.push_back({h_tok.p[i] < 0 ? -1 : h_tok.p[i], h_lp.p[i]});
  return out;
}

result<std::vector<model::token_logprob>> cuda_backend::greedy_last() {
  auto& I = *impl_;
  if (!I.last_buf || I.last_rows == 0) return std::vector<model::token_logprob>{};
  if (auto s = I.use_device(); !s) return make_error(s.error());
  auto& sb = *I.last_buf;
  kernels::greedy_kernel<<<I.last_rows, kernels::k_block, 0, I.stream>>>(sb.logits.p, I.hp().n_vocab, sb.greedy.p,
                                                                         sb.logprob.p);
  return I.copy_back_samples(sb, I.last_rows);
}

result<std::vector<model::token_logprob>> cuda_backend::sample_last(const std::vector<model::sampling_params>& ps,
                                                                    const std::vector<int64_t>& n_generated) {
  auto& I = *impl_;
  if (!I.last_buf || I.last_rows == 0) return std::vector<model::token_logprob>{};
  if (ps.size() != static_cast<size_t>(I.last_rows) || n_generated.size() != ps.size())
    return make_error("sample_last needs one sampling_params and one n_generated per logits row");
  bool all_greedy = true;
  for (const auto& p : ps) {
    if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f || p.min_p > 0.0f ||
        p.n_logprobs > 0 || !p.logit_bias.empty())
      return make_error("device sampling does not apply penalties, logit_bias, min_p or logprob alternatives");
    if (p.temperature > 0.0f && (p.top_k < 1 || p.top_k > kernels::k_max_device_top_k))
      return make_error("device sampling needs top_k in 1.." + std::to_string(kernels::k_max_device_top_k) +
                        " when temperature > 0");
    all_greedy = all_greedy && p.temperature <= 0.0f;
  }
  if (all_greedy) return greedy_last();
  // Mixed rows: every row goes through the top-k kernel; a greedy row is top_k 1 at any temperature.
  std::vector<kernels::sample_args> args(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    const bool greedy = ps[i].temperature <= 0.0f;
    args[i] = {greedy ? 1.0f : ps[i].temperature, greedy ? 1 : ps[i].top_k, greedy ? 1.0f : ps[i].top_p, ps[i].seed,
               n_generated[i]};
  }
  if (auto s = I.use_device(); !s) return make_error(s.error());
  auto& sb = *I.last_buf;
  const int n_vocab = I.hp().n_vocab;
  // Arguments through pinned staging into a kept device buffer: nothing is allocated per step
  // once the largest batch has been seen (cudaFree would synchronize the whole device).
  TROUPE_CUDA_TRY(I.h_args.reserve(args.size()));
  TROUPE_CUDA_TRY(I.d_args.reserve(args.size()));
  std::copy(args.begin(), args.end(), I.h_args.p);
  // The split-GEMM scratch is free between steps and holds at least rows x n_vocab floats.
  TROUPE_CUDA_TRY(sb.acc.reserve(static_cast<size_t>(I.last_rows) * n_vocab));
  TROUPE_CUDA_TRY(cudaMemcpyAsync(I.d_args.p, I.h_args.p, args.size() * sizeof(args[0]), cudaMemcpyHostToDevice,
                                  I.stream));
  kernels::sample_topk_kernel<<<I.last_rows, kernels::k_block, 0, I.stream>>>(sb.logits.p, sb.acc.p, n_vocab,
                                                                              I.d_args.p, sb.greedy.p, sb.logprob.p);
  return I.copy_back_samples(sb, I.last_rows);
}

model::backend_factory cuda_backend_factory() {
  return [](std::shared_ptr<llama_model> m, const backend_options& o) -> result<std::unique_ptr<model::backend>> {
    cuda_options c;
    c.graphs = o.cuda_graphs;  // model.cuda_graphs
    if (const char* g = std::getenv("TROUPE_CUDA_GRAPHS")) c.graphs = std::string(g) != "0";
    if (const char* g = std::getenv("TROUPE_CUDA_SPLIT")) c.split_activations = std::string(g) != "0";
    auto r = cuda_backend::create(std::move(m), o, c);
    if (!r) return make_error(r.error());
    return std::unique_ptr<model::backend>(std::move(r.value()));
  };
}

status add_cuda_backend(named_registry<model::backend_factory>& r) { return r.add("cuda", cuda_backend_factory()); }

}  // namespace troupe::gpu

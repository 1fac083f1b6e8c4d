// The cuda backend's step, run on the host: the same dataflow as cuda_backend.cu's
// enqueue_step (QKV and gate|up stacked into one matrix each, fp16 weights, fp16 GEMM inputs
// split into hi + lo, f32 accumulation, RoPE over the stacked Q|K heads of a row, fp16 KV in
// blocks, one attention per query head, residuals folded into the down/out projections), built
// from gpu/kernel_math.hpp, against the cpu backend on synthetic models. It checks the plan of the
// device step where no device exists; cuBLAS and the kernels' thread mapping are checked only on
// a GPU (cuda_backend_test, scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "gpu/kernel_math.hpp"
#include "model/backend.hpp"
#include "model/quant.hpp"
#include "tests/support/synthetic_model.hpp"

namespace m = troupe::gpu::math;
using namespace troupe;

namespace {

// fp16 matrix [rows][n_in] from stacked weight views, dequantized as the backend uploads them
// (kept as the floats those fp16 values are, for speed).
std::vector<float> stack(const std::vector<const model::weight_view*>& parts) {
  std::vector<float> out;
  std::vector<float> row;
  for (const auto* w : parts) {
    row.resize(static_cast<size_t>(w->n_in));
    for (int64_t r = 0; r < w->n_out; ++r) {
      model::dequantize_row(w->type, static_cast<const uint8_t*>(w->data) + static_cast<size_t>(r) * w->row_stride,
                            row.data(), w->n_in);
      for (float x : row) out.push_back(model::round_fp16(x));
    }
  }
  return out;
}

class emulated_cuda {
 public:
  emulated_cuda(std::shared_ptr<model::llama_model> mdl, int block_size, int n_blocks, bool split)
      : m_(std::move(mdl)), split_(split) {
    const auto& p = m_->params();
    geom_ = {p.n_head_kv, p.head_dim, block_size};
    emb_ = stack({&m_->token_embd()});
    if (!p.tied_output) head_ = stack({&m_->output()});
    for (const auto& L : m_->layers()) {
      wqkv_.push_back(stack({&L.wq, &L.wk, &L.wv}));
      wo_.push_back(stack({&L.wo}));
      wgu_.push_back(stack({&L.w_gate, &L.w_up}));
      wdown_.push_back(stack({&L.w_down}));
    }
    const size_t per_layer = static_cast<size_t>(n_blocks) * geom_.block_stride();
    K_.assign(per_layer * p.n_layer, 0);
    V_.assign(per_layer * p.n_layer, 0);
  }

  // Logits of each sequence's last token.
  std::vector<float> forward(const model::batch& b) {
    const auto& p = m_->params();
    const int ne = p.n_embd, nq = p.n_q_dim(), nkv = p.n_kv_dim(), nff = p.n_ff, hd = p.head_dim;
    const int ld = nq + 2 * nkv;
    std::vector<int32_t> tok, pos, seq, rows;
    for (size_t si = 0; si < b.seqs.size(); ++si) {
      const auto& s = b.seqs[si];
      for (size_t j = 0; j < s.tokens.size(); ++j) {
        tok.push_back(s.tokens[j]);
        pos.push_back(s.n_past + static_cast<int32_t>(j));
        seq.push_back(static_cast<int32_t>(si));
      }
      rows.push_back(static_cast<int32_t>(tok.size()) - 1);
    }
    const int T = static_cast<int>(tok.size());
    std::vector<float> x(static_cast<size_t>(T) * ne), xn(x.size()), qkv(static_cast<size_t>(T) * ld),
        att(static_cast<size_t>(T) * nq), gu(static_cast<size_t>(T) * 2 * nff), h(static_cast<size_t>(T) * nff);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < ne; ++i) x[static_cast<size_t>(t) * ne + i] = emb_[static_cast<size_t>(tok[t]) * ne + i];
    const size_t per_layer = K_.size() / static_cast<size_t>(p.n_layer);
    for (int il = 0; il < p.n_layer; ++il) {
      const auto& L = m_->layers()[static_cast<size_t>(il)];
      uint16_t* K = K_.data() + per_layer * il;
      uint16_t* V = V_.data() + per_layer * il;
      for (int t = 0; t < T; ++t) m::rms_norm_row(&x[static_cast<size_t>(t) * ne], L.attn_norm, &xn[static_cast<size_t>(t) * ne], ne, p.rms_eps);
      linear(wqkv_[static_cast<size_t>(il)], ld, ne, xn, T, qkv, false);
      for (int t = 0; t < T; ++t) {
        float* row = &qkv[static_cast<size_t>(t) * ld];
        if (p.qkv_bias)
          for (int i = 0; i < ld; ++i) row[i] += i < nq ? L.bq[i] : i < nq + nkv ? L.bk[i - nq] : L.bv[i - nq - nkv];
        const int half = p.n_rot / 2;
        for (int i = 0; i < (p.n_head + p.n_head_kv) * half; ++i)
          m::rope_rotate_pair(row + static_cast<int64_t>(i / half) * hd, p.rope == model::rope_style::neox, i % half,
                              p.n_rot, pos[t], p.rope_freq_base, p.rope_freq_scale);
        const int32_t* table = b.seqs[static_cast<size_t>(seq[t])].block_table.data();
        for (int e = 0; e < nkv; ++e) m::kv_write_elem(K, V, geom_, table, pos[t], e, row + nq, row + nq + nkv);
      }
      for (int t = 0; t < T; ++t) {
        const int32_t* table = b.seqs[static_cast<size_t>(seq[t])].block_table.data();
        for (int hq = 0; hq < p.n_head; ++hq)
          m::attend_head(&qkv[static_cast<size_t>(t) * ld + hq * hd], K, V, geom_, table, pos[t] + 1, hq,
                         p.n_head / p.n_head_kv, 1.0f / std::sqrt(static_cast<float>(hd)),
                         &att[static_cast<size_t>(t) * nq + hq * hd]);
      }
      linear(wo_[static_cast<size_t>(il)], ne, nq, att, T, x, true);
      for (int t = 0; t < T; ++t) m::rms_norm_row(&x[static_cast<size_t>(t) * ne], L.ffn_norm, &xn[static_cast<size_t>(t) * ne], ne, p.rms_eps);
      linear(wgu_[static_cast<size_t>(il)], 2 * nff, ne, xn, T, gu, false);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < nff; ++i)
          h[static_cast<size_t>(t) * nff + i] = m::silu_mul(gu[static_cast<size_t>(t) * 2 * nff + i], gu[static_cast<size_t>(t) * 2 * nff + nff + i]);
      linear(wdown_[static_cast<size_t>(il)], ne, nff, h, T, x, true);
    }
    const int n_out = static_cast<int>(rows.size());
    std::vector<float> xo(static_cast<size_t>(n_out) * ne), logits(static_cast<size_t>(n_out) * p.n_vocab);
    for (int r = 0; r < n_out; ++r) m::rms_norm_row(&x[static_cast<size_t>(rows[r]) * ne], m_->output_norm(), &xo[static_cast<size_t>(r) * ne], ne, p.rms_eps);
    linear(p.tied_output ? emb_ : head_, p.n_vocab, ne, xo, n_out, logits, false);
    return logits;
  }

 private:
  // y[t] (+)= W * in[t] with in rounded to fp16 (split into hi + lo when split_), f32 sums.
  void linear(const std::vector<float>& w, int n_out, int n_in, const std::vector<float>& in, int T,
              std::vector<float>& y, bool accumulate) const {
    std::vector<float> hi(static_cast<size_t>(n_in)), lo(static_cast<size_t>(n_in)), wf(static_cast<size_t>(n_in));
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < n_in; ++i) {
        uint16_t a, c;
        m::split_half(in[static_cast<size_t>(t) * n_in + i], &a, &c);
        hi[static_cast<size_t>(i)] = m::half_to_float(a);
        lo[static_cast<size_t>(i)] = split_ ? m::half_to_float(c) : 0.0f;
      }
      for (int o = 0; o < n_out; ++o) {
        const float* wr = &w[static_cast<size_t>(o) * n_in];
        float s_hi = 0.0f, s_lo = 0.0f;
        for (int i = 0; i < n_in; ++i) {
          const float wv = wr[i];
          s_hi += wv * hi[static_cast<size_t>(i)];
          s_lo += wv * lo[static_cast<size_t>(i)];
        }
        float& dst = y[static_cast<size_t>(t) * n_out + o];
        dst = (accumulate ? dst : 0.0f) + (s_hi + s_lo);
      }
    }
  }

  std::shared_ptr<model::llama_model> m_;
  bool split_;
  m::kv_geom geom_;
  std::vector<float> emb_, head_;
  std::vector<std::vector<float>> wqkv_, wo_, wgu_, wdown_;
  std::vector<uint16_t> K_, V_;
};

struct parity {
  float max_abs = 0.0f;
  int prompts_equal = 0;
};

// n_prompts prompts with reversed block ranges, prefill then n_gen greedy steps on both.
parity compare(std::shared_ptr<model::llama_model> mdl, bool split, int n_prompts, int n_gen) {
  const auto& p = mdl->params();
  const int bs = 16, per = (70 + n_gen + bs - 1) / bs;
  auto cpu = model::make_backend("cpu", mdl, {});
  EXPECT_TRUE(cpu) << cpu.error();
  emulated_cuda emu(mdl, bs, n_prompts * per, split);
  std::vector<model::batch_sequence> a(static_cast<size_t>(n_prompts));
  for (int i = 0; i < n_prompts; ++i) {
    auto& s = a[static_cast<size_t>(i)];
    s.seq_id = static_cast<uint64_t>(i);
    for (int k = 0; k < per; ++k) s.block_table.push_back((n_prompts - 1 - i) * per + (per - 1 - k));
    for (int j = 0; j < 4 + (i * 7) % 60; ++j)
      s.tokens.push_back(static_cast<int32_t>(m::uniform01(77 + i, j) * p.n_vocab));
  }
  auto g = a;
  parity out;
  std::vector<bool> same(static_cast<size_t>(n_prompts), true);
  for (int step = 0; step <= n_gen; ++step) {
    model::batch ba, bg;
    ba.seqs = a;
    bg.seqs = g;
    auto la = cpu.value()->forward(ba);
    EXPECT_TRUE(la) << la.error();
    const auto lg = emu.forward(bg);
    for (int i = 0; i < n_prompts; ++i) {
      const float* ra = la->row(static_cast<size_t>(i));
      const float* rg = lg.data() + static_cast<size_t>(i) * p.n_vocab;
      if (same[static_cast<size_t>(i)])
        for (int v = 0; v < p.n_vocab; ++v) out.max_abs = std::max(out.max_abs, std::fabs(ra[v] - rg[v]));
      const auto ta = static_cast<int32_t>(std::max_element(ra, ra + p.n_vocab) - ra);
      const auto tg = static_cast<int32_t>(std::max_element(rg, rg + p.n_vocab) - rg);
      if (step < n_gen && ta != tg) same[static_cast<size_t>(i)] = false;
      for (auto* s : {&a[static_cast<size_t>(i)], &g[static_cast<size_t>(i)]}) {
        s->n_past += static_cast<int32_t>(s->tokens.size());
        s->tokens = {s == &a[static_cast<size_t>(i)] ? ta : tg};
      }
    }
  }
  for (bool s : same) out.prompts_equal += s;
  return out;
}

std::shared_ptr<model::llama_model> synthetic(const std::string& arch) {
  test::synthetic_options o;
  o.arch = arch;
  o.matrix_type = model::ggml_type::f16;
  o.embd_type = model::ggml_type::f16;
  return model::llama_model::load(test::make_synthetic_file(o)).value();
}

}  // namespace

TEST(CudaStepEmulation, MatchesCpuBackendLlama) {
  const auto r = compare(synthetic("llama"), true, 6, 8);
  EXPECT_LT(r.max_abs, 1e-2f);  // logits are O(10); fp16 KV rounding and sum order remain
  EXPECT_EQ(r.prompts_equal, 6);
}

TEST(CudaStepEmulation, MatchesCpuBackendQwen2) {
  const auto r = compare(synthetic("qwen2"), true, 6, 8);
  EXPECT_LT(r.max_abs, 1e-2f);  // logits are O(10); fp16 KV rounding and sum order remain
  EXPECT_EQ(r.prompts_equal, 6);
}

// Plain fp16 activations: further from cpu than split ones, which is why split is the default.
TEST(CudaStepEmulation, PlainFp16ActivationsAreLessAccurate) {
  auto mdl = synthetic("llama");
  const auto split = compare(mdl, true, 4, 4), plain = compare(mdl, false, 4, 4);
  std::printf("max |emulated cuda - cpu| logits: split %.4g, plain fp16 %.4g\n", split.max_abs, plain.max_abs);
  EXPECT_LT(split.max_abs, plain.max_abs);
}

// The parity estimate of scripts/gpu-check.sh at SmolLM2-135M's depth and width (vocabulary of
// the synthetic writer, 264 tokens), for split and plain activations; slow (about 10 minutes on
// two cores), so only on request: TROUPE_GPU_EMULATE_SMOLLM2=1. Seen on 2026-12-02: split, max
// logit difference 0.040 and 20/20 prompts equal; plain fp16, 0.099 and 20/20.
TEST(CudaStepEmulation, SmolLm2ShapeEstimate) {
  if (!std::getenv("TROUPE_GPU_EMULATE_SMOLLM2")) GTEST_SKIP() << "set TROUPE_GPU_EMULATE_SMOLLM2=1";
  test::synthetic_options o;
  o.n_embd = 576;
  o.n_layer = 30;
  o.n_head = 9;
  o.n_head_kv = 3;
  o.n_ff = 1536;
  o.n_ctx = 2048;
  o.matrix_type = model::ggml_type::f16;
  o.embd_type = model::ggml_type::f16;
  auto mdl = model::llama_model::load(test::make_synthetic_file(o)).value();
  for (bool split : {true, false}) {
    const auto r = compare(mdl, split, 20, 32);
    std::printf("split %d: max |emulated cuda - cpu| %.4g, greedy 32 equal on %d/20\n", split, r.max_abs,
                r.prompts_equal);
  }
}

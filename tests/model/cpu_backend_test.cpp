// The CPU backend against a plain float implementation of the same transformer written here
// from the definitions (dequantized weights, contiguous float KV, no batching, no paging).
#include "model/cpu_backend.hpp"
#include "model/paged_attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "model/kv_manager.hpp"
#include "model/quant.hpp"
#include "tests/support/synthetic_model.hpp"

using namespace troupe;
using namespace troupe::model;

namespace {

std::vector<float> dequant(const weight_view& w) {
  std::vector<float> out(static_cast<size_t>(w.n_in * w.n_out));
  for (int64_t r = 0; r < w.n_out; ++r)
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_stride, out.data() + r * w.n_in, w.n_in);
  return out;
}

void mat(const std::vector<float>& W, int64_t n_in, int64_t n_out, const float* x, float* y) {
  for (int64_t o = 0; o < n_out; ++o) {
    double s = 0;
    for (int64_t i = 0; i < n_in; ++i) s += static_cast<double>(W[static_cast<size_t>(o * n_in + i)]) * x[i];
    y[o] = static_cast<float>(s);
  }
}

void rope_ref(float* x, int n_heads, int hd, int n_rot, rope_style st, int pos, float base) {
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < n_rot / 2; ++i) {
      double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / n_rot);
      int a = st == rope_style::normal ? 2 * i : i;
      int b = st == rope_style::normal ? 2 * i + 1 : i + n_rot / 2;
      float* v = x + h * hd;
      double x0 = v[a], x1 = v[b];
      v[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
      v[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
    }
}

// Logits of the last token after feeding `tokens` from position 0.
std::vector<float> reference_logits(const llama_model& m, const std::vector<int32_t>& tokens) {
  const auto& hp = m.params();
  const int ne = hp.n_embd, nq = hp.n_q_dim(), nkv = hp.n_kv_dim(), hd = hp.head_dim;
  const int T = static_cast<int>(tokens.size());
  auto emb = dequant(m.token_embd());
  std::vector<float> x(static_cast<size_t>(T * ne));
  for (int t = 0; t < T; ++t)
    std::copy_n(emb.begin() + static_cast<long>(tokens[static_cast<size_t>(t)]) * ne, ne, x.begin() + t * ne);
  auto rms = [&](const float* in, const float* w, float* out) {
    double ss = 0;
    for (int i = 0; i < ne; ++i) ss += static_cast<double>(in[i]) * in[i];
    double sc = 1.0 / std::sqrt(ss / ne + hp.rms_eps);
    for (int i = 0; i < ne; ++i) out[i] = static_cast<float>(in[i] * sc * w[i]);
  };
  std::vector<float> xn(static_cast<size_t>(ne)), K(static_cast<size_t>(T * nkv)), V(static_cast<size_t>(T * nkv));
  for (const auto& L : m.layers()) {
    auto wq = dequant(L.wq), wk = dequant(L.wk), wv = dequant(L.wv), wo = dequant(L.wo);
    auto wg = dequant(L.w_gate), wu = dequant(L.w_up), wd = dequant(L.w_down);
    std::vector<float> Q(static_cast<size_t>(T * nq));
    for (int t = 0; t < T; ++t) {
      rms(&x[static_cast<size_t>(t * ne)], L.attn_norm, xn.data());
      mat(wq, ne, nq, xn.data(), &Q[static_cast<size_t>(t * nq)]);
      mat(wk, ne, nkv, xn.data(), &K[static_cast<size_t>(t * nkv)]);
      mat(wv, ne, nkv, xn.data(), &V[static_cast<size_t>(t * nkv)]);
      if (hp.qkv_bias) {
        for (int i = 0; i < nq; ++i) Q[static_cast<size_t>(t * nq + i)] += L.bq[i];
        for (int i = 0; i < nkv; ++i) K[static_cast<size_t>(t * nkv + i)] += L.bk[i];
        for (int i = 0; i < nkv; ++i) V[static_cast<size_t>(t * nkv + i)] += L.bv[i];
      }
      rope_ref(&Q[static_cast<size_t>(t * nq)], hp.n_head, hd, hp.n_rot, hp.rope, t, hp.rope_freq_base);
      rope_ref(&K[static_cast<size_t>(t * nkv)], hp.n_head_kv, hd, hp.n_rot, hp.rope, t, hp.rope_freq_base);
    }
    for (int t = 0; t < T; ++t) {
      std::vector<float> att(static_cast<size_t>(nq));
      for (int h = 0; h < hp.n_head; ++h) {
        int g = h / (hp.n_head / hp.n_head_kv);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e30;
        for (int p = 0; p <= t; ++p) {
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += static_cast<double>(Q[static_cast<size_t>(t * nq + h * hd + i)]) * K[static_cast<size_t>(p * nkv + g * hd + i)];
          s[static_cast<size_t>(p)] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[static_cast<size_t>(p)]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int i = 0; i < hd; ++i) {
          double o = 0;
          for (int p = 0; p <= t; ++p) o += s[static_cast<size_t>(p)] / z * V[static_cast<size_t>(p * nkv + g * hd + i)];
          att[static_cast<size_t>(h * hd + i)] = static_cast<float>(o);
        }
      }
      std::vector<float> o(static_cast<size_t>(ne));
      mat(wo, nq, ne, att.data(), o.data());
      for (int i = 0; i < ne; ++i) x[static_cast<size_t>(t * ne + i)] += o[static_cast<size_t>(i)];
    }
    for (int t = 0; t < T; ++t) {
      rms(&x[static_cast<size_t>(t * ne)], L.ffn_norm, xn.data());
      std::vector<float> g(static_cast<size_t>(hp.n_ff)), u(static_cast<size_t>(hp.n_ff)), d(static_cast<size_t>(ne));
      mat(wg, ne, hp.n_ff, xn.data(), g.data());
      mat(wu, ne, hp.n_ff, xn.data(), u.data());
      for (int i = 0; i < hp.n_ff; ++i) g[static_cast<size_t>(i)] = g[static_cast<size_t>(i)] / (1 + std::exp(-g[static_cast<size_t>(i)])) * u[static_cast<size_t>(i)];
      mat(wd, hp.n_ff, ne, g.data(), d.data());
      for (int i = 0; i < ne; ++i) x[static_cast<size_t>(t * ne + i)] += d[static_cast<size_t>(i)];
    }
  }
  rms(&x[static_cast<size_t>((T - 1) * ne)], m.output_norm(), xn.data());
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  mat(dequant(m.output()), ne, hp.n_vocab, xn.data(), logits.data());
  return logits;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct fixture {
  std::shared_ptr<llama_model> model;
  std::unique_ptr<backend> be;
  explicit fixture(const test::synthetic_options& o, int threads = 2, bool kv_f32 = false,
                   matmul_order order = matmul_order::llama_cpp) {
    auto m = llama_model::load(test::make_synthetic_file(o));
    if (!m) throw std::runtime_error(m.error());
    model = m.value();
    backend_options bo;
    bo.n_threads = threads;
    bo.kv_bytes = 8ll << 20;
    bo.kv_f32 = kv_f32;
    bo.matmul = order;
    auto b = make_backend("cpu", model, bo);
    if (!b) throw std::runtime_error(b.error());
    be = std::move(b.value());
  }
  // Feeds tokens in chunks of `chunk` through a fresh sequence, returns last logits.
  std::vector<float> run(const std::vector<int32_t>& toks, int chunk, std::vector<int32_t> table) {
    std::vector<float> last;
    for (size_t at = 0; at < toks.size(); at += static_cast<size_t>(chunk)) {
      batch b;
      batch_sequence s;
      s.seq_id = 1;
      s.n_past = static_cast<int32_t>(at);
      s.tokens.assign(toks.begin() + static_cast<long>(at), toks.begin() + static_cast<long>(std::min(toks.size(), at + static_cast<size_t>(chunk))));
      s.block_table = table;
      b.seqs.push_back(s);
      auto r = be->forward(b);
      EXPECT_TRUE(r.ok()) << r.error();
      last.assign(r->row(0), r->row(0) + r->n_vocab);
    }
    return last;
  }
};

std::vector<int32_t> table_of(int n, int first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// All prompts in one step, sequence i in blocks 20 + 2i and 21 + 2i.
batch batch_of(const std::vector<std::vector<int32_t>>& prompts) {
  batch b;
  for (size_t i = 0; i < prompts.size(); ++i) {
    batch_sequence s;
    s.seq_id = i;
    s.tokens = prompts[i];
    s.block_table = table_of(2, 20 + static_cast<int>(i) * 2);
    b.seqs.push_back(s);
  }
  return b;
}

}  // namespace

// fp16 KV memory is the only rounding on the F32 path: ~1e-3 relative on K/V, which moves
// logits of magnitude ~1-5 by a few 1e-3.
TEST(CpuBackend, F32MatchesFloatReference) {
  test::synthetic_options o;
  fixture f(o);
  auto toks = random_tokens(37, f.model->params().n_vocab, 1);
  auto ref = reference_logits(*f.model, toks);
  auto got = f.run(toks, 64, table_of(4));
  EXPECT_LT(max_abs_diff(ref.data(), got.data(), ref.size()), 2e-2f);
}

// With f32 K/V and f32 weights nothing is rounded below float: agreement to float accuracy.
TEST(CpuBackend, F32KvMatchesFloatReferenceTightly) {
  test::synthetic_options o;
  fixture f(o, 2, /*kv_f32=*/true);
  auto toks = random_tokens(37, f.model->params().n_vocab, 1);
  auto ref = reference_logits(*f.model, toks);
  auto got = f.run(toks, 9, {3, 1, 0, 2});
  EXPECT_LT(max_abs_diff(ref.data(), got.data(), ref.size()), 1e-3f);
}

// q8 K/V memory (backend_options::kv_q8): each row of 64 values as int8 codes with a float scale
// (max |x| / 127), so a value is off by at most scale / 2, ~0.4% of the row's largest. Measured
// against the float reference on this model (logits up to ~190): max logit difference 0.17, i.e.
// 0.09% of the largest logit (fp16 K/V: 0.006); asserted: < 0.25% of the largest logit.
// Chunked prefill and scattered blocks read the same codes, so they agree as with fp16.
TEST(CpuBackend, Q8KvMemoryHalvesTheBytesAndStaysCloseToReference) {
  test::synthetic_options o;
  auto m = llama_model::load(test::make_synthetic_file(o));
  ASSERT_TRUE(m.ok()) << m.error();
  backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 8ll << 20;
  bo.kv_q8 = true;
  auto be = make_backend("cpu", m.value(), bo);
  if (!kv_q8_supported(m.value()->params().head_dim)) {
    ASSERT_FALSE(be.ok());
    EXPECT_NE(be.error().find("AVX2"), std::string::npos) << be.error();
    GTEST_SKIP() << "no AVX2: " << be.error();
  }
  ASSERT_TRUE(be.ok()) << be.error();
  const auto& hp = m.value()->params();
  EXPECT_EQ(be.value()->kv_bytes_per_token(), static_cast<size_t>(hp.head_dim + 4) * hp.n_head_kv * hp.n_layer * 2);
  fixture f16(o);
  EXPECT_LT(be.value()->kv_bytes_per_token() * 100, f16.be->kv_bytes_per_token() * 54);  // 53%: 68 of 128 bytes a row
  EXPECT_GT(be.value()->n_blocks(), f16.be->n_blocks() * 18 / 10);  // the same budget holds ~1.9x the tokens

  fixture f(o);
  f.be = std::move(be.value());
  auto toks = random_tokens(37, hp.n_vocab, 1);
  auto ref = reference_logits(*f.model, toks);
  auto whole = f.run(toks, 64, table_of(4));
  const float d = max_abs_diff(ref.data(), whole.data(), ref.size());
  const float d16 = max_abs_diff(ref.data(), f16.run(toks, 64, table_of(4)).data(), ref.size());
  float mag = 0;
  for (float v : ref) mag = std::max(mag, std::fabs(v));
  std::printf("  max |logit - reference|: q8 K/V %.4f, fp16 K/V %.4f (logits up to %.2f)\n", d, d16, mag);
  EXPECT_LT(d, 2.5e-3f * mag);
  auto chunked = f.run(toks, 7, {9, 2, 31, 5});
  EXPECT_LT(max_abs_diff(whole.data(), chunked.data(), whole.size()), 1e-3f);

  EXPECT_FALSE(make_backend("cpu", m.value(), [&] {
                 auto both = bo;
                 both.kv_f32 = true;
                 return both;
               }()).ok());
}

TEST(CpuBackend, Qwen2BiasesAndNeoxRopeMatchReference) {
  test::synthetic_options o;
  o.arch = "qwen2";
  fixture f(o);
  EXPECT_EQ(f.model->params().rope, rope_style::neox);
  auto toks = random_tokens(21, f.model->params().n_vocab, 2);
  auto ref = reference_logits(*f.model, toks);
  auto got = f.run(toks, 64, table_of(2));
  EXPECT_LT(max_abs_diff(ref.data(), got.data(), ref.size()), 2e-2f);
}

// Heads of 40 values (not a multiple of 16): the Q/K/V matmul's 400 rows then go out in chunks
// of 160 (multiples of 80; 16-row alignment alone would cut heads at 112), each head's biases,
// RoPE and K/V stores done by the thread that computed the head (row_epilogue); llama and qwen2
// (biases, NeoX RoPE) against the float reference, with a prompt chunked so that steps hold
// several tokens.
TEST(CpuBackend, HeadsOf40ValuesMatchReference) {
  for (const char* arch : {"llama", "qwen2"}) {
    test::synthetic_options o;
    o.arch = arch;
    o.n_embd = 240;
    o.n_head = 6;
    o.n_head_kv = 2;
    fixture f(o);
    ASSERT_EQ(f.model->params().head_dim, 40);
    auto toks = random_tokens(29, f.model->params().n_vocab, 6);
    auto ref = reference_logits(*f.model, toks);
    auto got = f.run(toks, 11, table_of(2));
    EXPECT_LT(max_abs_diff(ref.data(), got.data(), ref.size()), 2e-2f) << arch;
  }
}

// Quantized weights: the reference uses the same dequantized weights in float; the backend also
// quantizes activations to 8 bits per 32-block (relative error ~0.4% per product, averaging
// out over the dot), so the tolerance is looser.
TEST(CpuBackend, QuantizedTypesMatchReference) {
  for (auto t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k,
                 ggml_type::f16, ggml_type::bf16}) {
    test::synthetic_options o;
    o.matrix_type = t;
    o.embd_type = t == ggml_type::q4_1 ? ggml_type::q8_0 : t;
    fixture f(o);
    auto toks = random_tokens(19, f.model->params().n_vocab, 3);
    auto ref = reference_logits(*f.model, toks);
    auto got = f.run(toks, 64, table_of(2));
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    EXPECT_LT(max_abs_diff(ref.data(), got.data(), ref.size()), 0.05f * scale + 0.05f) << type_name(static_cast<uint32_t>(t));
  }
}

TEST(CpuBackend, ChunkedPrefillAndScatteredBlocksGiveTheSameLogits) {
  test::synthetic_options o;
  o.matrix_type = ggml_type::q4_1;
  o.embd_type = ggml_type::q8_0;
  fixture f(o);
  auto toks = random_tokens(50, f.model->params().n_vocab, 4);
  auto whole = f.run(toks, 64, table_of(4));
  auto chunked = f.run(toks, 7, {9, 2, 31, 5});
  auto one_by_one = f.run(toks, 1, {12, 13, 0, 40});
  EXPECT_LT(max_abs_diff(whole.data(), chunked.data(), whole.size()), 1e-3f);
  EXPECT_LT(max_abs_diff(whole.data(), one_by_one.data(), whole.size()), 1e-3f);
}

TEST(CpuBackend, BatchedSequencesMatchRunsAlone) {
  test::synthetic_options o;
  o.matrix_type = ggml_type::q4_1;
  o.embd_type = ggml_type::q8_0;
  fixture f(o);
  const int n_vocab = f.model->params().n_vocab;
  std::vector<std::vector<int32_t>> prompts = {random_tokens(5, n_vocab, 10), random_tokens(23, n_vocab, 11),
                                               random_tokens(1, n_vocab, 12), random_tokens(17, n_vocab, 13)};
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) alone.push_back(f.run(prompts[i], 64, table_of(2, static_cast<int>(i) * 2)));
  auto r = f.be->forward(batch_of(prompts));
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->seq_ids.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_LT(max_abs_diff(alone[i].data(), r->row(i), alone[i].size()), 1e-3f) << "sequence " << i;
}

// A profile attached to the backend counts pure decode steps only (prompt chunks, even of one
// token, would mix another kind of step in), and its phases account for the step's time;
// detached, it stops counting.
TEST(CpuBackend, StepProfileTimesDecodeStepsPhaseByPhase) {
  test::synthetic_options o;
  o.matrix_type = ggml_type::q4_1;
  o.embd_type = ggml_type::q8_0;
  fixture f(o);
  auto* cpu = dynamic_cast<cpu_backend*>(f.be.get());
  ASSERT_NE(cpu, nullptr);
  step_profile prof;
  cpu->set_profile(&prof);
  const auto toks = random_tokens(12, f.model->params().n_vocab, 21);
  // Sequence i: a prompt of 5 tokens in chunks of 4 and 1, then two decode steps with the others.
  auto step = [&](std::vector<std::pair<int, int>> seq_from_to) {
    batch b;
    for (auto [i, from] : seq_from_to) {
      batch_sequence s;
      s.seq_id = static_cast<uint64_t>(i);
      s.n_past = from;
      s.n_prompt = 5;
      const int to = from < 4 ? 4 : from + 1;
      for (int k = from; k < to; ++k) s.tokens.push_back(toks[static_cast<size_t>(k)]);
      s.block_table = table_of(2, 2 * i);
      b.seqs.push_back(s);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto r = f.be->forward(b);
    EXPECT_TRUE(r.ok()) << r.error();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  step({{0, 0}, {1, 0}, {2, 0}});
  step({{0, 4}, {1, 4}, {2, 4}});  // the prompts' last token, one per sequence: still prefill
  EXPECT_EQ(prof.steps, 0);
  double wall = step({{0, 5}, {1, 5}, {2, 5}});
  wall += step({{0, 6}, {1, 6}});
  EXPECT_EQ(prof.steps, 2);
  EXPECT_EQ(prof.tokens, 5);
  for (auto ph : {step_profile::qkv, step_profile::attention, step_profile::wo, step_profile::gate_up,
                  step_profile::down, step_profile::head})
    EXPECT_GT(prof.seconds[ph], 0.0) << step_profile::names[ph];
  EXPECT_LE(prof.total(), wall);
  cpu->set_profile(nullptr);
  step({{2, 6}});
  EXPECT_EQ(prof.steps, 2);
}

TEST(CpuBackend, BadStepsAreErrorsNamingTheProblem) {
  test::synthetic_options o;
  fixture f(o, 1);
  batch b;
  batch_sequence s;
  s.seq_id = 7;
  s.tokens = {1, 2, 99999};
  s.block_table = {0};
  b.seqs = {s};
  auto r = f.be->forward(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("token id 99999"), std::string::npos) << r.error();

  b.seqs[0].tokens = std::vector<int32_t>(40, 1);
  r = f.be->forward(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("block table"), std::string::npos) << r.error();

  b.seqs[0].block_table = {0, 1, 100000};
  r = f.be->forward(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("out of range"), std::string::npos);

  b.seqs[0].tokens = std::vector<int32_t>(10, 1);
  b.seqs[0].n_past = 510;
  b.seqs[0].block_table = table_of(40);
  r = f.be->forward(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("context"), std::string::npos) << r.error();
}

TEST(CpuBackend, UnknownBackendListsTheKnownOnes) {
  test::synthetic_options o;
  auto m = llama_model::load(test::make_synthetic_file(o));
  ASSERT_TRUE(m.ok());
  auto b = make_backend("tpu", m.value(), {});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().find("cpu"), std::string::npos);
}

TEST(LlamaModel, MissingTensorAndBadArchitectureAreNamed) {
  test::synthetic_options o;
  auto bytes = test::make_synthetic_gguf(o);
  // Unsupported architecture: rewrite the value "llama" in place to "lxama".
  auto s = std::string(bytes.begin(), bytes.end());
  auto at = s.find("llama");
  ASSERT_NE(at, std::string::npos);
  auto broken = bytes;
  broken[at + 1] = 'x';
  auto m = llama_model::load(gguf_file::from_bytes(broken).value());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("unsupported architecture 'lxama'"), std::string::npos) << m.error();
}

// The fast matmul order (weights repacked 16 rows at a time) computes the same model: within
// the quantized tolerance of the float reference, and a sequence's logits do not depend on the
// batch it runs in, bit for bit
// (Q4_K matrices with a Q6_K embedding and head, like Q4_K_M files; Q6_K matrices with an F16
// head, which has no fast kernel: a mix of packed and llama.cpp-order matrices.)
TEST(CpuBackend, FastMatmulOrderMatchesReferenceAndIsBatchInvariant) {
  for (auto t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
    test::synthetic_options o;
    o.matrix_type = t;
    o.embd_type = t == ggml_type::q4_1   ? ggml_type::q8_0
                  : t == ggml_type::q4_k ? ggml_type::q6_k
                  : t == ggml_type::q6_k ? ggml_type::f16
                                         : t;
    fixture f(o, 2, false, matmul_order::fast);
    const auto* cpu = dynamic_cast<const cpu_backend*>(f.be.get());
    ASSERT_NE(cpu, nullptr);
    if (cpu->order() != matmul_order::fast) GTEST_SKIP() << "no fast kernels on this CPU (" << matmul_isa() << ")";
    const int n_vocab = f.model->params().n_vocab;
    auto toks = random_tokens(19, n_vocab, 3);
    auto ref = reference_logits(*f.model, toks);
    auto got = f.run(toks, 64, table_of(2));
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    EXPECT_LT(max_abs_diff(ref.data(), got.data(), ref.size()), 0.05f * scale + 0.05f) << type_name(static_cast<uint32_t>(t));

    std::vector<std::vector<int32_t>> prompts = {random_tokens(5, n_vocab, 10), random_tokens(23, n_vocab, 11),
                                                 random_tokens(1, n_vocab, 12)};
    std::vector<std::vector<float>> alone;
    for (size_t i = 0; i < prompts.size(); ++i) alone.push_back(f.run(prompts[i], 64, table_of(2, static_cast<int>(i) * 2)));
    auto r = f.be->forward(batch_of(prompts));
    ASSERT_TRUE(r.ok()) << r.error();
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(std::memcmp(alone[i].data(), r->row(i), alone[i].size() * sizeof(float)), 0)
          << type_name(static_cast<uint32_t>(t)) << " sequence " << i;
  }
}

// Speculative verification feeds [last token, p1..pk] as one chunk and reads the logits at every
// position (batch_sequence::n_logits). Positions past the prompt sum in the decode order however
// the steps are cut, so each row must be bit for bit the logits a one-token decode there gives,
// and the K/V the chunk wrote must be what the decodes wrote (the next decode agrees too): in
// both matmul orders and with fp16 and q8 K/V memory.
TEST(CpuBackend, SeveralLogitsRowsOfAChunkEqualOneTokenDecodes) {
  struct variant {
    matmul_order order;
    bool q8;
  };
  for (auto v : {variant{matmul_order::llama_cpp, false}, variant{matmul_order::fast, false},
                 variant{matmul_order::llama_cpp, true}, variant{matmul_order::fast, true}}) {
    test::synthetic_options o;
    o.matrix_type = ggml_type::q4_1;
    o.embd_type = ggml_type::q8_0;
    auto m = llama_model::load(test::make_synthetic_file(o));
    ASSERT_TRUE(m.ok()) << m.error();
    if (v.q8 && !kv_q8_supported(m.value()->params().head_dim)) continue;  // refused by name: see the q8 test
    backend_options bo;
    bo.n_threads = 2;
    bo.kv_bytes = 8ll << 20;
    bo.kv_q8 = v.q8;
    bo.matmul = v.order;
    auto made = make_backend("cpu", m.value(), bo);
    ASSERT_TRUE(made.ok()) << made.error();
    auto& be = *made.value();
    const std::string what = std::string(v.order == matmul_order::fast ? "fast" : "llama.cpp") + (v.q8 ? " q8" : " fp16");
    const int n_vocab = m.value()->params().n_vocab;
    const auto prompt = random_tokens(13, n_vocab, 21);
    const auto next = random_tokens(7, n_vocab, 22);  // the decoded token, then six "proposed" ones
    auto step = [&](uint64_t id, const std::vector<int32_t>& toks, int32_t n_past, std::vector<int32_t> table,
                    int32_t n_logits) {
      batch b;
      batch_sequence s;
      s.seq_id = id;
      s.tokens = toks;
      s.n_past = n_past;
      s.n_prompt = static_cast<int32_t>(prompt.size());
      s.block_table = std::move(table);
      s.n_logits = n_logits;
      b.seqs.push_back(std::move(s));
      auto r = be.forward(b);
      EXPECT_TRUE(r.ok()) << r.error();
      return r.ok() ? std::move(r.value()) : batch_logits{};
    };
    const auto n_p = static_cast<int32_t>(prompt.size());
    // One token at a time in blocks 0-1, the chunk in blocks 4-5 (another sequence in the same step
    // checks that rows come per sequence in order).
    step(1, prompt, 0, table_of(2), 1);
    std::vector<std::vector<float>> single;
    for (size_t j = 0; j < next.size(); ++j) {
      auto r = step(1, {next[j]}, n_p + static_cast<int32_t>(j), table_of(2), 1);
      ASSERT_EQ(r.seq_ids.size(), 1u) << what;
      single.emplace_back(r.row(0), r.row(0) + n_vocab);
    }
    step(2, prompt, 0, table_of(2, 4), 1);
    batch b;
    for (uint64_t id : {uint64_t{3}, uint64_t{2}}) {
      batch_sequence s;
      s.seq_id = id;
      s.tokens = id == 2 ? next : std::vector<int32_t>{prompt[0], prompt[1]};
      s.n_past = id == 2 ? n_p : 0;
      s.n_prompt = id == 2 ? n_p : 2;
      s.block_table = table_of(2, id == 2 ? 4 : 8);
      s.n_logits = id == 2 ? static_cast<int32_t>(next.size()) : 1;
      b.seqs.push_back(std::move(s));
    }
    auto r = be.forward(b);
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_EQ(r->seq_ids.size(), 1 + next.size()) << what;
    EXPECT_EQ(r->seq_ids[0], 3u);
    for (size_t j = 0; j < next.size(); ++j) {
      EXPECT_EQ(r->seq_ids[1 + j], 2u);
      EXPECT_EQ(std::memcmp(single[j].data(), r->row(1 + j), single[j].size() * sizeof(float)), 0)
          << what << ": position " << j << " differs by " << max_abs_diff(single[j].data(), r->row(1 + j), single[j].size());
    }
    const int32_t end = n_p + static_cast<int32_t>(next.size());
    auto a = step(1, {5}, end, table_of(2), 1);
    auto c = step(2, {5}, end, table_of(2, 4), 1);
    EXPECT_EQ(std::memcmp(a.row(0), c.row(0), static_cast<size_t>(n_vocab) * sizeof(float)), 0) << what << ": K/V differ";
  }
}

TEST(CpuBackend, LogitsRowsOutsideTheChunkAreRefusedByName) {
  test::synthetic_options o;
  fixture f(o, 1);
  batch b;
  batch_sequence s;
  s.seq_id = 4;
  s.tokens = {1, 2, 3};
  s.block_table = {0};
  s.n_logits = 4;
  b.seqs = {s};
  auto r = f.be->forward(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("n_logits 4"), std::string::npos) << r.error();
  b.seqs[0].n_logits = 0;
  r = f.be->forward(b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("n_logits 0"), std::string::npos) << r.error();
  b.seqs[0].n_logits = 3;
  r = f.be->forward(b);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->seq_ids, (std::vector<uint64_t>{4, 4, 4}));
}

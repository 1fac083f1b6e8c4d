// The quality gate (model/eval.cpp) on the real SmolLM2-135M-Instruct file: perplexity of a fixed
// text, and every fast path's drift from the bit-exact reference (llama.cpp's matmul order, f32
// K/V), bounded by a spread measured in the same run (see QualityGate.FastPathsStayNearTheReference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "model/eval.hpp"
#include "model/loaded_model.hpp"
#include "model/matmul.hpp"
#include "model/paged_attention.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;

namespace {

// Three 256-token windows: 381 scored tokens; five runs, some 12 s on 2 idle cores.
constexpr int32_t n_ctx = 256;
constexpr int32_t n_chunks = 3;

struct config {
  const char* name;
  matmul_order order;
  bool kv_f32, kv_q8;
};

class QualityGate : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!troupe::test::real_model_available())
      GTEST_SKIP() << "real model not found at " << troupe::test::real_model_path();
    // It would override every configuration's order (cpu_backend.cpp) and compare a path with itself.
    ::unsetenv("TROUPE_MATMUL_ORDER");
    auto lm = loaded_model::load(troupe::test::real_model_path());
    ASSERT_TRUE(lm.ok()) << lm.error();
    m_ = lm.value();
    std::ifstream in(troupe::test::fixture("eval/gpl-3.txt"), std::ios::binary);
    ASSERT_TRUE(in) << "tests/fixtures/eval/gpl-3.txt is missing";
    std::ostringstream ss;
    ss << in.rdbuf();
    auto toks = m_->encode_prompt(ss.str());
    ASSERT_TRUE(toks.ok()) << toks.error();
    eval_options o;
    o.n_ctx = n_ctx;
    o.max_chunks = n_chunks;
    auto w = eval_windows(*toks, o);
    ASSERT_TRUE(w.ok()) << w.error();
    ASSERT_EQ(w->size(), static_cast<size_t>(n_chunks));
    windows_ = *w;
  }

  std::unique_ptr<backend> make(const config& c) {
    backend_options bo;
    bo.n_threads = 2;
    bo.matmul = c.order;
    bo.kv_f32 = c.kv_f32;
    bo.kv_q8 = c.kv_q8;
    bo.kv_bytes = int64_t{n_ctx + 32} * m_->weights->params().n_kv_dim() * m_->weights->params().n_layer * 8;
    auto be = make_backend("cpu", m_->weights, bo);
    EXPECT_TRUE(be.ok()) << be.error();
    return be.ok() ? std::move(be.value()) : nullptr;
  }

  std::vector<eval_chunk> run(const config& c) {
    std::vector<eval_chunk> out;
    auto be = make(c);
    if (!be) return out;
    auto st = evaluate(*be, windows_, [&](const eval_chunk& ch) {
      out.push_back(ch);
      return troupe::status{};
    });
    EXPECT_TRUE(st.ok()) << c.name << ": " << st.error();
    return out;
  }

  kl_summary compare(const std::vector<eval_chunk>& ref, const std::vector<eval_chunk>& test) {
    kl_accumulator acc;
    EXPECT_EQ(ref.size(), test.size());
    for (size_t i = 0; i < ref.size() && i < test.size(); ++i) {
      auto st = acc.add(ref[i], test[i]);
      EXPECT_TRUE(st.ok()) << st.error();
    }
    return acc.summary();
  }

  std::shared_ptr<loaded_model> m_;
  std::vector<std::vector<int32_t>> windows_;
};

void print(const char* name, const kl_summary& s) {
  std::printf("  %-26s mean KL %.6f  p99 KL %.6f  max KL %.6f  top-1 %.4f  PPL %.4f (ratio %.6f)\n", name,
              s.mean_kl, s.p99_kl, s.max_kl, s.top1_agreement, s.ppl_test, s.ppl_ratio());
}

}  // namespace

TEST_F(QualityGate, FastPathsStayNearTheReference) {
  const config exact_f32{"llama.cpp order, f32 K/V", matmul_order::llama_cpp, true, false};
  const config exact_f16{"llama.cpp order, fp16 K/V", matmul_order::llama_cpp, false, false};
  const config fast_f16{"fast order, fp16 K/V", matmul_order::fast, false, false};
  const config fast_q8{"fast order, q8 K/V", matmul_order::fast, false, true};
  const auto ref = run(exact_f32);
  ASSERT_EQ(ref.size(), static_cast<size_t>(n_chunks));
  ppl_accumulator ppl;
  for (const auto& c : ref) ppl.add(c);
  std::printf("reference (%s): PPL %.4f over %lld tokens\n", exact_f32.name, ppl.ppl(),
              static_cast<long long>(ppl.count()));
  // SmolLM2-135M on licence prose: a working model is far below the vocabulary's 49152 (uniform)
  // and above 1 (a broken scorer that reads the targets); this text measured 19.72.
  EXPECT_GT(ppl.ppl(), 2.0);
  EXPECT_LT(ppl.ppl(), 40.0);

  const auto same = compare(ref, run(exact_f32));
  print("same config again", same);
  const auto f16_rows = run(exact_f16);
  const auto spread = compare(ref, f16_rows);
  print(exact_f16.name, spread);
  const auto fast_rows = run(fast_f16);
  const auto fast = compare(ref, fast_rows);
  print(fast_f16.name, fast);
  // The matmul order's own share of the drift (the rest is fp16 K/V's).
  print("fast vs exact, both fp16", compare(f16_rows, fast_rows));
  // Without the fast kernels (an AVX2-only CPU) the "fast" backend keeps llama.cpp's order: the
  // rows above are then that order's, and q8 K/V memory is refused by name.
  const bool fast_runs = fast_order_available();
  if (!fast_runs) std::printf("  (no fast kernels on this CPU (%s): the fast rows are llama.cpp's order)\n", matmul_isa());
  const bool q8_runs = fast_runs && kv_q8_supported(m_->weights->params().head_dim);
  const kl_summary q8 = q8_runs ? compare(ref, run(fast_q8)) : fast;
  if (q8_runs) {
    print(fast_q8.name, q8);
  } else {
    std::printf("  %-26s not available on this CPU (%s)\n", fast_q8.name, matmul_isa());
  }

  // The engine is deterministic: the same configuration twice is the same rows bit for bit.
  EXPECT_EQ(same.mean_kl, 0.0);
  EXPECT_EQ(same.top1_agreement, 1.0);

  // The bound: the spread that storing K/V in fp16 instead of f32 causes in the exact order, the
  // drift every fp16 run already carries and llama-perplexity's own f16-vs-f32 yardstick, times 4.
  // Measured here (AMD EPYC, 2026-12-04): fp16 mean KL 0.0033 / p99 0.0151; fast + fp16 0.0034 /
  // 0.0166 (1.0x / 1.1x); fast + q8 0.0059 / 0.0335 (1.8x / 2.2x). 4x leaves room for another
  // CPU's kernels and another text while a real fault (a wrong block scale, a misplaced row, a
  // stale K/V slot) moves the KL by orders of magnitude, not by a factor of 2. The floor keeps
  // the bound from vanishing if fp16 ever matched f32 exactly on this text.
  const double factor = 4.0;
  const double mean_bound = factor * std::max(spread.mean_kl, 1e-4);
  const double p99_bound = factor * std::max(spread.p99_kl, 1e-3);
  for (const auto* p : {&fast, &q8}) {
    const char* name = p == &fast ? fast_f16.name : fast_q8.name;
    EXPECT_LE(p->mean_kl, mean_bound) << name << " drifts: mean KL " << p->mean_kl << " > " << factor
                                      << " x the fp16 K/V spread " << spread.mean_kl;
    EXPECT_LE(p->p99_kl, p99_bound) << name << " drifts: p99 KL " << p->p99_kl << " > " << factor
                                    << " x the fp16 K/V spread " << spread.p99_kl;
    // 0.05 of 381 tokens is 19 flipped argmaxes beyond fp16's own (measured 6 more for both).
    EXPECT_GE(p->top1_agreement, spread.top1_agreement - 0.05) << name;
    // Measured 1.1% and 1.2%; 3% is 2.5x that, and a broken path's perplexity moves by far more.
    EXPECT_LT(std::abs(std::log(p->ppl_ratio())), 0.03) << name << " perplexity ratio " << p->ppl_ratio();
  }
}

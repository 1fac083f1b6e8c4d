// Troupe's CPU backend against llama.cpp on the real SmolLM2-135M-Instruct file: greedy
// continuations and top-5 logits recorded by scripts/make-llama-reference.sh
// (tests/fixtures/llama_reference/README.md says how).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/batch_generator.hpp"
#include "model/cpu_backend.hpp"
#include "model/loaded_model.hpp"
#include "model/paged_attention.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;

namespace {

struct ref_step {
  int32_t chosen = -1;
  std::vector<std::pair<int32_t, float>> top;
};
struct ref_prompt {
  std::string name;
  bool chat = false;
  std::vector<int32_t> ids;
  std::string text;
  std::vector<ref_step> steps;
};

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<ref_prompt> load_reference() {
  std::ifstream in(troupe::test::fixture("llama_reference/smollm2_greedy.txt"));
  std::vector<ref_prompt> prompts;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string kind;
    ss >> kind;
    if (kind == "prompt") {
      size_t idx, n;
      int chat;
      ref_prompt p;
      ss >> idx >> p.name >> chat >> n;
      p.chat = chat != 0;
      p.ids.resize(n);
      for (auto& id : p.ids) ss >> id;
      if (prompts.size() <= idx) prompts.resize(idx + 1);
      prompts[idx] = std::move(p);
    } else if (kind == "text") {
      size_t idx;
      std::string hex;
      ss >> idx >> hex;
      prompts.at(idx).text = unhex(hex);
    } else if (kind == "step") {
      size_t idx, step;
      ref_step s;
      ss >> idx >> step >> s.chosen;
      int32_t id;
      float logit;
      while (ss >> id >> logit) s.top.emplace_back(id, logit);
      prompts.at(idx).steps.push_back(std::move(s));
    }
  }
  return prompts;
}

std::shared_ptr<loaded_model> real_model() {
  static std::shared_ptr<loaded_model> m = [] {
    auto r = loaded_model::load(troupe::test::real_model_path());
    return r ? r.value() : nullptr;
  }();
  return m;
}

}  // namespace

TEST(LlamaReferenceRealModel, TokenizerGivesLlamaCppsPromptIds) {
  if (!troupe::test::real_model_available()) GTEST_SKIP() << "real model not fetched";
  auto prompts = load_reference();
  ASSERT_GE(prompts.size(), 20u);
  auto m = real_model();
  ASSERT_TRUE(m);
  for (const auto& p : prompts) {
    auto ids = m->vocab.encode(p.text, false, p.chat);
    EXPECT_EQ(ids, p.ids) << p.name;
  }
}

// Greedy tokens and logits. Troupe follows ggml's float arithmetic op by op: the quantized
// matmuls (the same int8 activation codes and fp16-rounded scales, and block products summed in
// ggml_vec_dot_*'s 8-lane order with Q4_1's mins added block by block), RMSNorm, RoPE (theta as a
// running product), SiLU and softmax with ggml's exp, and attention summed in the order llama.cpp
// uses for a prompt batch or for a decoded token (batch_sequence::n_prompt). On this machine the
// result is bit-identical: 26/26 prompts equal over all 32 steps, every top-5 logit equal.
// Bit-identity is what it takes: SmolLM2's residual stream carries a few huge outlier features
// (norm ~2e4 from layer 11), where a 1-ulp difference anywhere flips an int8 activation code and
// grows to ~0.1-1 logit by the last layer. llama.cpp differs from itself that much: against this
// reference its KV f16 variant keeps 21/26 prompts identical (top-5 |diff| median 0.13, max 2.0),
// flash attention 19/26, the prompt fed one token at a time 24/26 (scripts/reference/
// llama_reference.cpp, TROUPE_REF_* variants). On a CPU whose kernels take other paths (AVX2
// only: llama.cpp's reference was made with AVX-512), last bits may differ again, so what is
// asserted leaves that room while keeping the bar:
//  - at least 24 of the 26 prompts identical over all 32 steps (the issue: 18 of 20, 90%);
//  - every divergence at a near-tie: llama.cpp's top-1/top-2 gap at that step < 1.5;
//  - while continuations agree, llama.cpp's top-5 logits reproduced: median |diff| < 0.05 and
//    every |diff| < 1.5 (logits here are 10-35; measured here: 0 and 0).
struct parity {
  int all_match = 0;
  float median = 0, p99 = 0, max = 0, max_gap = 0;  // |top-5 logit diff|; the widest top-2 gap diverged at
  bool ran = false;
};

// Greedy-decodes the reference prompts in `order`; prints and returns how close to llama.cpp.
void measure_parity(matmul_order order, parity& out, bool kv_q8 = false) {
  auto prompts = load_reference();
  auto m = real_model();
  ASSERT_TRUE(m);
  backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 128ll << 20;
  bo.kv_f32 = !kv_q8;  // as the reference was made (llama.cpp with f32 K/V)
  bo.kv_q8 = kv_q8;
  bo.matmul = order;
  auto be = make_backend("cpu", m->weights, bo);
  if (kv_q8 && !kv_q8_supported(m->weights->params().head_dim)) return;  // refused on this CPU
  ASSERT_TRUE(be.ok()) << be.error();
  const auto* cpu = dynamic_cast<const cpu_backend*>(be.value().get());
  if (!cpu || cpu->order() != order) return;  // that order has no kernels on this CPU

  std::vector<generation_request> reqs;
  for (const auto& p : prompts) {
    generation_request r;
    r.prompt = p.ids;
    r.max_tokens = static_cast<int32_t>(p.steps.size());
    reqs.push_back(r);
  }
  batch_generator gen(*be.value(), 512);
  auto outs = gen.run(reqs, nullptr, {}, /*keep_logits=*/true);

  int all_match = 0;
  std::vector<float> diffs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const auto& o = outs[i];
    ASSERT_TRUE(o.error.empty()) << o.error;
    size_t agree = 0;
    while (agree < p.steps.size() && agree < o.tokens.size() && o.tokens[agree] == p.steps[agree].chosen) ++agree;
    if (agree == p.steps.size()) {
      ++all_match;
    } else {
      const auto& top = p.steps[agree].top;
      const float gap = top.size() > 1 ? top[0].second - top[1].second : 0.0f;
      std::printf("  %-22s diverges at step %2zu: llama.cpp %d, troupe %d; llama.cpp's top-2 gap there %.3f\n",
                  p.name.c_str(), agree, p.steps[agree].chosen, agree < o.tokens.size() ? o.tokens[agree] : -1, gap);
      out.max_gap = std::max(out.max_gap, gap);
    }
    for (size_t s = 0; s <= agree && s < p.steps.size() && s < o.logits.size(); ++s)
      for (const auto& [id, logit] : p.steps[s].top) {
        const float d = std::fabs(o.logits[s][static_cast<size_t>(id)] - logit);
        diffs.push_back(d);
      }
  }
  std::sort(diffs.begin(), diffs.end());
  ASSERT_FALSE(diffs.empty());
  const float med = diffs[diffs.size() / 2], p99 = diffs[diffs.size() * 99 / 100], mx = diffs.back();
  std::printf("  %s order%s: greedy %d/%zu prompts identical over all %zu steps\n", matmul_order_name(order), kv_q8 ? ", q8 K/V" : "", all_match,
              prompts.size(), prompts[0].steps.size());
  std::printf("  top-5 logits: %zu compared, |diff| median %.4f, p99 %.4f, max %.4f\n", diffs.size(), med, p99, mx);
  out.all_match = all_match;
  out.median = med;
  out.p99 = p99;
  out.max = mx;
  out.ran = true;
}

TEST(LlamaReferenceRealModel, GreedyContinuationsAndLogitsMatchLlamaCpp) {
  if (!troupe::test::real_model_available()) GTEST_SKIP() << "real model not fetched";
  parity p;
  measure_parity(matmul_order::llama_cpp, p);
  ASSERT_TRUE(p.ran);
  EXPECT_LT(p.max_gap, 1.5f) << "diverged where llama.cpp's choice was clear";
  EXPECT_LT(p.max, 1.5f);
  EXPECT_LT(p.median, 0.05f);  // measured 0 (bit-identical) on this reference
  EXPECT_GE(p.all_match, 24);
}

// The fast matmul order (model.matmul = "fast") gives up bit-identity for speed: each block's
// integer product is scaled once instead of in 8 partial sums, and attention sums in its own
// order (attention_order::fast, 16 positions' scores reduced together): last-bit differences,
// which SmolLM2's outlier features grow as described above; its norms sum squares in 16 lanes
// and its softmax sums in float lanes. Measured: 17/26 prompts identical (19/26 with the earlier
// 8-position attention: which near-ties flip is chance), top-5 |diff| median 0.133, p99 0.66,
// max 1.19, every divergence at a top-2 gap < 0.64 -- the spread of llama.cpp against itself
// (f16 K/V: 21/26, median 0.13, max 2.0; flash attention: 19/26).
// Asserted: divergences only where llama.cpp's top-2 gap was < 1.5, median < 0.2, every
// |diff| < 2.5, and at least 16 of 26 prompts identical (a count of near-tie flips, so it is
// given two prompts of room below what was measured).
TEST(LlamaReferenceRealModel, FastMatmulOrderStaysWithinLlamaCppsOwnSpread) {
  if (!troupe::test::real_model_available()) GTEST_SKIP() << "real model not fetched";
  parity p;
  measure_parity(matmul_order::fast, p);
  if (!p.ran) GTEST_SKIP() << "no fast matmul kernels on this CPU";
  EXPECT_LT(p.max_gap, 1.5f) << "diverged where llama.cpp's choice was clear";
  EXPECT_LT(p.max, 2.5f);
  EXPECT_LT(p.median, 0.2f);
  EXPECT_GE(p.all_match, 16);
}

// q8 K/V memory (kv.q8: int8 codes with a scale per row of 64, K scored against the query
// quantized to int8 per 32 values, as llama.cpp scores q8_0 K) on top of the fast order.
// Measured: 18/26 prompts identical, top-5 |diff| median 0.172, p99 0.88, max 1.91, every
// divergence at a top-2 gap < 0.64 (before the query was quantized: 19/26, median 0.158, max
// 1.32): still llama.cpp's own spread (f16 K/V against f32: 21/26, median 0.13, max 2.0).
// Asserted as for the fast order, with the median allowed up to 0.25.
TEST(LlamaReferenceRealModel, Q8KvMemoryStaysWithinLlamaCppsOwnSpread) {
  if (!troupe::test::real_model_available()) GTEST_SKIP() << "real model not fetched";
  parity p;
  measure_parity(matmul_order::fast, p, /*kv_q8=*/true);
  if (!p.ran) GTEST_SKIP() << "no q8 K/V or fast kernels on this CPU";
  EXPECT_LT(p.max_gap, 1.5f) << "diverged where llama.cpp's choice was clear";
  EXPECT_LT(p.max, 2.5f);
  EXPECT_LT(p.median, 0.25f);
  EXPECT_GE(p.all_match, 16);
}

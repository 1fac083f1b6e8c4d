// model/eval.cpp without a model: the windows, perplexity and KL arithmetic against closed forms,
// and the reference file's round trip and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "model/eval.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe::model;

namespace {

// A chunk of rows given as probabilities (stored as their logs, as evaluate() stores them).
eval_chunk chunk(int32_t index, const std::vector<std::vector<double>>& probs, std::vector<int32_t> targets) {
  eval_chunk c;
  c.index = index;
  c.n_vocab = static_cast<int32_t>(probs[0].size());
  for (const auto& row : probs)
    for (double p : row) c.logprobs.push_back(static_cast<float>(std::log(p)));
  c.targets = std::move(targets);
  return c;
}

}  // namespace

TEST(EvalWindows, CutsWholeWindowsAndSetsTheirFirstToken) {
  std::vector<int32_t> toks(25);
  for (int i = 0; i < 25; ++i) toks[i] = 100 + i;
  eval_options o;
  o.n_ctx = 8;
  auto w = eval_windows(toks, o);
  ASSERT_TRUE(w.ok()) << w.error();
  ASSERT_EQ(w->size(), 3u);  // the last 1 token fills no window
  EXPECT_EQ((*w)[1][0], 108);
  EXPECT_EQ((*w)[2][7], 123);
  o.bos = 1;
  o.max_chunks = 2;
  w = eval_windows(toks, o);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[0][0], 1);
  EXPECT_EQ((*w)[1][0], 1);
  EXPECT_EQ((*w)[1][1], 109);
}

TEST(EvalWindows, RefusesATextShorterThanAWindowAndBadSizes) {
  eval_options o;
  o.n_ctx = 16;
  auto w = eval_windows(std::vector<int32_t>(15, 3), o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().find("fewer than one window of 16"), std::string::npos) << w.error();
  o.n_ctx = 4;
  EXPECT_NE(eval_windows(std::vector<int32_t>(64, 3), o).error().find("--ctx"), std::string::npos);
  o.n_ctx = 16;
  o.max_chunks = -1;
  EXPECT_NE(eval_windows(std::vector<int32_t>(64, 3), o).error().find("--chunks"), std::string::npos);
}

TEST(EvalAccumulators, PerplexityIsExpOfTheMeanNll) {
  ppl_accumulator p;
  p.add(chunk(0, {{0.5, 0.25, 0.25}, {0.1, 0.8, 0.1}}, {0, 1}));
  EXPECT_EQ(p.count(), 2);
  EXPECT_NEAR(p.ppl(), std::exp(-(std::log(0.5) + std::log(0.8)) / 2), 1e-6);
}

TEST(EvalAccumulators, KlDivergenceTopOneAndRatioMatchClosedForms) {
  const auto ref = chunk(0, {{0.5, 0.25, 0.25}, {0.7, 0.2, 0.1}, {0.2, 0.3, 0.5}}, {0, 1, 2});
  const auto test = chunk(0, {{0.5, 0.25, 0.25}, {0.3, 0.6, 0.1}, {0.1, 0.3, 0.6}}, {0, 1, 2});
  kl_accumulator acc;
  ASSERT_TRUE(acc.add(ref, test).ok());
  const auto s = acc.summary();
  const double kl1 = 0.7 * std::log(0.7 / 0.3) + 0.2 * std::log(0.2 / 0.6);
  const double kl2 = 0.2 * std::log(0.2 / 0.1) + 0.5 * std::log(0.5 / 0.6);
  EXPECT_EQ(s.n_tokens, 3);
  EXPECT_NEAR(s.mean_kl, (0.0 + kl1 + kl2) / 3, 1e-6);
  EXPECT_NEAR(s.max_kl, std::max(kl1, kl2), 1e-6);
  EXPECT_NEAR(s.p99_kl, std::max(kl1, kl2), 1e-6);  // nearest rank of 3 values: the largest
  EXPECT_NEAR(s.top1_agreement, 2.0 / 3.0, 1e-12);  // row 1's argmax moved from 0 to 1
  const double ppl_ref = std::exp(-(std::log(0.5) + std::log(0.2) + std::log(0.5)) / 3);
  const double ppl_test = std::exp(-(std::log(0.5) + std::log(0.6) + std::log(0.6)) / 3);
  EXPECT_NEAR(s.ppl_ratio(), ppl_test / ppl_ref, 1e-5);
}

TEST(EvalAccumulators, RefusesChunksOfDifferentWindows) {
  kl_accumulator acc;
  auto st = acc.add(chunk(0, {{0.5, 0.5}}, {0}), chunk(1, {{0.5, 0.5}}, {0}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().find("not of the same windows"), std::string::npos);
  EXPECT_FALSE(acc.add(chunk(0, {{0.5, 0.5}}, {0}), chunk(0, {{0.5, 0.5}}, {1})).ok());
}

TEST(EvalLogitsFile, RoundTripsAndRefusesAnotherRun) {
  troupe::test::temp_dir dir("eval_logits");
  const std::string path = dir.str("ref.bin");
  // Windows of 8 tokens: rows for positions 4..6, predicting tokens 5..7.
  const std::vector<std::vector<int32_t>> windows = {{1, 2, 3, 4, 5, 6, 7, 8}, {9, 10, 11, 12, 13, 14, 15, 16}};
  const auto c0 = chunk(0, {{0.5, 0.5, 0.0001}, {0.2, 0.7, 0.1}, {0.1, 0.1, 0.8}}, {6, 7, 8});
  const auto c1 = chunk(1, {{0.3, 0.3, 0.4}, {0.6, 0.2, 0.2}, {0.9, 0.05, 0.05}}, {14, 15, 16});
  {
    auto w = logits_writer::open(path, 3, windows);
    ASSERT_TRUE(w.ok()) << w.error();
    ASSERT_TRUE(w->write(c0).ok());
    ASSERT_TRUE(w->write(c1).ok());
    ASSERT_TRUE(w->close().ok());
  }
  auto r = logits_reader::open(path, 3, windows);
  ASSERT_TRUE(r.ok()) << r.error();
  auto a = r->next();
  auto b = r->next();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->logprobs, c0.logprobs);
  EXPECT_EQ(b->logprobs, c1.logprobs);
  EXPECT_EQ(b->targets, c1.targets);
  EXPECT_EQ(b->index, 1);
  EXPECT_NE(r->next().error().find("no more windows"), std::string::npos);

  EXPECT_NE(logits_reader::open(path, 4, windows).error().find("this model has 4"), std::string::npos);
  auto other = windows;
  other[1][3] = 99;
  EXPECT_NE(logits_reader::open(path, 3, other).error().find("another text"), std::string::npos);
  EXPECT_NE(logits_reader::open(path, 3, {windows[0]}).error().find("--ctx and --chunks"), std::string::npos);
  EXPECT_NE(logits_reader::open(dir.str("none.bin"), 3, windows).error().find("cannot read"), std::string::npos);

  // A file cut inside its rows is refused when the rows are read, not taken as zeros.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  auto cut = logits_reader::open(path, 3, windows);
  ASSERT_TRUE(cut.ok());
  EXPECT_TRUE(cut->next().ok());
  EXPECT_NE(cut->next().error().find("ends inside window 1"), std::string::npos);

  std::FILE* g = std::fopen(dir.str("junk.bin").c_str(), "wb");
  std::fputs("not a logits file at all", g);
  std::fclose(g);
  EXPECT_NE(logits_reader::open(dir.str("junk.bin"), 3, windows).error().find("not a logits file"), std::string::npos);

  // NaN where a log-probability should be (its KL figures read as 0, a perfect match) is refused.
  const std::string bad = dir.str("nan.bin");
  {
    auto nan_chunk = c0;
    nan_chunk.logprobs[4] = std::numeric_limits<float>::quiet_NaN();
    auto w = logits_writer::open(bad, 3, windows);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->write(nan_chunk).ok());
    ASSERT_TRUE(w->write(c1).ok());
    ASSERT_TRUE(w->close().ok());
  }
  auto nan_reader = logits_reader::open(bad, 3, windows);
  ASSERT_TRUE(nan_reader.ok());
  EXPECT_NE(nan_reader->next().error().find("window 0 holds nan at value 4: not a log-probability"), std::string::npos);
}

#include "model/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace troupe::model;

namespace {
std::vector<float> logits_of(std::vector<float> v) { return v; }
}

TEST(Sampler, GreedyPicksTheArgmaxAndReportsItsLogprob) {
  auto l = logits_of({0.1f, 2.0f, 1.0f, 2.0f});
  sampling_params p;
  p.n_logprobs = 2;
  auto r = sample_token(l.data(), 4, p, {}, 0);
  EXPECT_EQ(r.token, 1) << "ties go to the lowest id";
  double z = std::exp(0.1) + std::exp(2.0) + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
}

// Without a logprob asked, plain greedy sampling finds the same first maximum and skips the
// log-softmax (logprob NaN); anything else still computes the logprob.
TEST(Sampler, PlainGreedyWithoutALogprobSkipsTheSoftmax) {
  auto l = logits_of({0.1f, 2.0f, 1.0f, 2.0f});
  sampling_params p;
  ASSERT_TRUE(p.plain_greedy());
  const auto with = sample_token(l.data(), 4, p, {}, 0, true);
  const auto without = sample_token(l.data(), 4, p, {}, 0, false);
  EXPECT_EQ(without.token, 1);
  EXPECT_EQ(without.token, with.token);
  EXPECT_TRUE(std::isnan(without.logprob));
  EXPECT_FALSE(std::isnan(with.logprob));
  for (auto change : {+[](sampling_params& q) { q.temperature = 0.5f; }, +[](sampling_params& q) { q.n_logprobs = 1; },
                      +[](sampling_params& q) { q.repetition_penalty = 1.1f; },
                      +[](sampling_params& q) { q.frequency_penalty = 0.5f; },
                      +[](sampling_params& q) { q.presence_penalty = 0.5f; }}) {
    sampling_params q;
    change(q);
    EXPECT_FALSE(q.plain_greedy());
    EXPECT_FALSE(std::isnan(sample_token(l.data(), 4, q, {1}, 0, false).logprob));
  }
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[static_cast<size_t>(i)] = static_cast<float>(i % 7) * 0.3f;
  sampling_params p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<int32_t> a, b, c;
  for (int n = 0; n < 50; ++n) {
    a.push_back(sample_token(l.data(), 100, p, {}, n).token);
    b.push_back(sample_token(l.data(), 100, p, {}, n).token);
  }
  p.seed = 999;
  for (int n = 0; n < 50; ++n) c.push_back(sample_token(l.data(), 100, p, {}, n).token);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, TopKTopPAndMinPRestrictTheCandidates) {
  auto l = logits_of({5.0f, 4.0f, 3.0f, 0.0f, -1.0f});
  sampling_params p;
  p.temperature = 1.0f;
  p.top_k = 2;
  for (int n = 0; n < 200; ++n) EXPECT_LT(sample_token(l.data(), 5, p, {}, n).token, 2);
  p.top_k = 0;
  p.top_p = 0.5f;  // the first token alone has p ≈ 0.66
  for (int n = 0; n < 200; ++n) EXPECT_EQ(sample_token(l.data(), 5, p, {}, n).token, 0);
  p.top_p = 1.0f;
  p.min_p = 0.3f;  // keeps tokens with p >= 0.3 * p_max: ids 0 and 1 (e^-1 ≈ 0.37)
  std::map<int32_t, int> seen;
  for (int n = 0; n < 400; ++n) ++seen[sample_token(l.data(), 5, p, {}, n).token];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[1], 40);
}

TEST(Sampler, TemperatureSamplesFollowTheDistribution) {
  auto l = logits_of({std::log(0.7f), std::log(0.2f), std::log(0.1f)});
  sampling_params p;
  p.temperature = 1.0f;
  p.seed = 5;
  int counts[3] = {0, 0, 0};
  for (int n = 0; n < 5000; ++n) ++counts[sample_token(l.data(), 3, p, {}, n).token];
  EXPECT_NEAR(counts[0] / 5000.0, 0.7, 0.03);
  EXPECT_NEAR(counts[1] / 5000.0, 0.2, 0.03);
  EXPECT_NEAR(counts[2] / 5000.0, 0.1, 0.03);
}

TEST(Sampler, PenaltiesDiscourageRecentTokens) {
  auto l = logits_of({2.0f, 1.9f, 0.0f});
  sampling_params p;
  p.repetition_penalty = 1.5f;
  EXPECT_EQ(sample_token(l.data(), 3, p, {0}, 0).token, 1);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  EXPECT_EQ(sample_token(l.data(), 3, p, {0}, 0).token, 1);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.05f;
  EXPECT_EQ(sample_token(l.data(), 3, p, {0}, 0).token, 0) << "one occurrence: 2.0 - 0.05 > 1.9";
  EXPECT_EQ(sample_token(l.data(), 3, p, {0, 0, 0}, 0).token, 1) << "three occurrences: 2.0 - 0.15 < 1.9";
  p.penalty_last_n = 1;
  EXPECT_EQ(sample_token(l.data(), 3, p, {0, 0, 2}, 0).token, 0) << "only the last token is looked at";
}

TEST(Sampler, ValidateNamesTheBadParameter) {
  sampling_params p;
  p.top_p = 0.0f;
  EXPECT_NE(p.validate().error().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1.0f;
  EXPECT_NE(p.validate().error().find("temperature"), std::string::npos);
  p = {};
  p.n_logprobs = 50;
  EXPECT_NE(p.validate().error().find("logprobs"), std::string::npos);
  EXPECT_TRUE(sampling_params{}.validate().ok());
}

#include "model/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <map>
#include <random>

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

namespace {

// The sampler's rule written out plainly (what sample_token did before it stopped sorting the
// vocabulary): every candidate ranked by (logit desc, id asc), probabilities exp((l - max) / t)
// in double normalised over the top_k kept, then min_p, top_p, and the draw.
using ranked = std::vector<std::pair<float, int32_t>>;

ranked rank_all(const std::vector<float>& l) {
  ranked c;
  for (size_t i = 0; i < l.size(); ++i) c.push_back({l[i], static_cast<int32_t>(i)});
  std::sort(c.begin(), c.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  return c;
}

int32_t reference_pick(const ranked& c, const sampling_params& p, double u) {
  size_t n = p.top_k > 0 ? std::min<size_t>(static_cast<size_t>(p.top_k), c.size()) : c.size();
  std::vector<double> pr(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += pr[i] = std::exp(static_cast<double>(c[i].first - c[0].first) / p.temperature);
  for (auto& x : pr) x /= sum;
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && pr[keep] >= p.min_p * pr[0]) ++keep;
    n = keep;
  }
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    size_t keep = 0;
    while (keep < n) {
      acc += pr[keep++];
      if (acc >= p.top_p) break;
    }
    n = std::max<size_t>(keep, 1);
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += pr[i];
  double left = u * total;
  for (size_t i = 0; i < n; ++i)
    if ((left -= pr[i]) < 0) return c[i].second;
  return c[n - 1].second;
}

// The draw sample_token makes (its model/sampler.cpp `uniform`), for the reference.
double draw(uint64_t seed, int64_t n) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  const uint64_t r = mix(mix(seed) ^ static_cast<uint64_t>(n) * 0xd1b54a32d192ed03ull);
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

// sample_token finds candidates without sorting the vocabulary (a bounded top-k pass, a ranked
// prefix grown while the cut-offs or the draw reach past it): the same tokens as the plain rule on
// a 49152-logit vocabulary with a peaked head, flat tails, ties, and every kind of cut-off. With
// top_k the weights are the plain rule's to the bit; over the whole vocabulary they are float
// exps, so a draw that lands within ~1e-7 of a boundary deep in a flat tail may pick the
// neighbouring token (seen once in 200 draws at u = 0.9994; none on these draws).
TEST(Sampler, FindsTheSameTokensAsSortingTheVocabulary) {
  std::mt19937 rng(3);
  const int nv = 49152;
  std::vector<std::vector<float>> rows;
  for (float spread : {0.5f, 3.0f}) {
    std::normal_distribution<float> nd(0.0f, spread);
    std::vector<float> l(nv);
    for (auto& x : l) x = nd(rng);
    for (int k = 0; k < 20; ++k) l[rng() % nv] += 12.0f;
    rows.push_back(l);
  }
  {
    std::normal_distribution<float> nd(0.0f, 1.0f);  // no head at all: draws land anywhere
    std::vector<float> l(nv);
    for (auto& x : l) x = nd(rng);
    rows.push_back(l);
  }
  std::vector<float> ties(nv, 0.0f);  // many equal logits: ranks by id
  for (int i = 0; i < nv; i += 7) ties[static_cast<size_t>(i)] = 1.0f;
  rows.push_back(ties);
  struct cfg {
    float t;
    int32_t k;
    float top_p, min_p;
  };
  const cfg cfgs[] = {{0.8f, 0, 1.0f, 0.0f},  {1.0f, 0, 1.0f, 0.0f},  {1.7f, 0, 1.0f, 0.0f}, {0.8f, 0, 0.95f, 0.0f},
                      {1.0f, 0, 0.5f, 0.0f},  {0.7f, 0, 1.0f, 0.05f}, {1.0f, 40, 1.0f, 0.0f}, {0.9f, 40, 0.9f, 0.0f},
                      {1.2f, 5000, 1.0f, 0.0f}, {1.0f, 1, 1.0f, 0.0f}, {1.0f, nv, 0.99f, 0.0f}};
  int draws = 0, mismatches = 0;
  for (const auto& l : rows) {
    const ranked order = rank_all(l);
    for (const auto& c : cfgs) {
      sampling_params p;
      p.temperature = c.t;
      p.top_k = c.k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      p.seed = 99;
      for (int n = 0; n < 30; ++n) {
        const int32_t got = sample_token(l.data(), nv, p, {}, n).token;
        const int32_t want = reference_pick(order, p, draw(p.seed, n));
        ++draws;
        if (got != want) {
          ++mismatches;
          ADD_FAILURE() << "t " << c.t << " top_k " << c.k << " top_p " << c.top_p << " min_p " << c.min_p << " draw "
                        << n << ": " << got << " vs " << want;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << draws;
}

// Edges of the whole-vocabulary path: a tiny temperature is greedy in effect (1/t used to overflow
// to inf, inf - inf to NaN, and the draw fell to the worst token); -inf logits are never drawn;
// a row of near-equal logits (all within a hundredth) draws each of them.
TEST(Sampler, TinyTemperaturesAndImpossibleTokens) {
  std::vector<float> l(5000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(i % 97) * 0.37f - 12.9f;
  l[123] = 40.0f;
  sampling_params p;
  p.seed = 3;
  for (float t : {1e-38f, 1e-30f, 1e-6f, 0.01f}) {
    p.temperature = t;
    for (int n = 0; n < 20; ++n) EXPECT_EQ(sample_token(l.data(), 5000, p, {}, n).token, 123) << "t " << t;
  }
  std::vector<float> masked(5000, -INFINITY);
  for (int i : {7, 1000, 4999}) masked[static_cast<size_t>(i)] = 1.0f;
  p.temperature = 1.5f;
  std::map<int32_t, int> seen;
  for (int n = 0; n < 300; ++n) ++seen[sample_token(masked.data(), 5000, p, {}, n).token];
  EXPECT_EQ(seen.size(), 3u);
  for (int i : {7, 1000, 4999}) EXPECT_GT(seen[i], 50) << i;
  std::vector<float> flat(4096);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = 0.01f * static_cast<float>(i % 13) / 13.0f;
  p.temperature = 1.0f;
  std::map<int32_t, int> spread;
  for (int n = 0; n < 4000; ++n) ++spread[sample_token(flat.data(), 4096, p, {}, n).token];
  EXPECT_GT(spread.size(), 2500u) << "a near-uniform row draws widely";
}

// Logits of a broken model file (NaN weights): every setting still returns a token of the
// vocabulary, never reads past its candidates (min_p found none and crashed the server).
TEST(Sampler, NonFiniteLogitsStillGiveAToken) {
  std::vector<float> all_nan(300, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> one_nan(300, 0.5f);
  one_nan[17] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> inf_row(300, 0.5f);
  inf_row[9] = INFINITY;
  for (auto* row : {&all_nan, &one_nan, &inf_row})
    for (float t : {0.0f, 0.7f, 1.0f})
      for (int variant = 0; variant < 4; ++variant) {
        sampling_params p;
        p.temperature = t;
        p.seed = 5;
        if (variant == 1) p.min_p = 0.1f;
        if (variant == 2) p.top_k = 10;
        if (variant == 3) p.top_p = 0.9f;
        for (int n = 0; n < 8; ++n) {
          const auto r = sample_token(row->data(), 300, p, {}, n, true);
          EXPECT_GE(r.token, 0);
          EXPECT_LT(r.token, 300);
        }
      }
}

// OpenAI logit_bias: added to the logits before anything else; the logprobs are of the biased
// distribution; -100 bans a token, a large positive bias forces one; sampled draws follow it too.
TEST(Sampler, LogitBiasIsAddedBeforeEverythingElse) {
  auto l = logits_of({0.1f, 2.0f, 1.0f, 2.0f});
  sampling_params p;
  p.logit_bias = {{1, -100.0f}, {3, -100.0f}};
  EXPECT_FALSE(p.plain_greedy());
  auto r = sample_token(l.data(), 4, p, {}, 0, false);
  EXPECT_EQ(r.token, 2) << "both maxima banned: the next best";
  const double z = std::exp(0.1) + std::exp(2.0 - 100.0) + std::exp(1.0) + std::exp(2.0 - 100.0);
  EXPECT_NEAR(r.logprob, 1.0 - std::log(z), 1e-5);
  p.logit_bias = {{0, 5.0f}};
  EXPECT_EQ(sample_token(l.data(), 4, p, {}, 0).token, 0) << "0.1 + 5 beats 2";
  // Sampled: a token biased by +100 wins every draw, one banned by -100 never comes.
  p.temperature = 1.0f;
  p.logit_bias = {{2, 100.0f}};
  for (int64_t n = 0; n < 50; ++n) EXPECT_EQ(sample_token(l.data(), 4, p, {}, n).token, 2);
  p.logit_bias = {{1, -100.0f}, {3, -100.0f}};
  for (int64_t n = 0; n < 200; ++n) {
    const auto t = sample_token(l.data(), 4, p, {}, n).token;
    EXPECT_TRUE(t == 0 || t == 2) << t;
  }
  // The bias comes before the penalties: a repeated, biased token is penalised from its biased logit.
  sampling_params q;
  q.logit_bias = {{0, 3.0f}};
  q.presence_penalty = 2.0f;
  auto pen = sample_token(l.data(), 4, q, {0}, 0);
  EXPECT_EQ(pen.token, 1) << "0.1 + 3 - 2 = 1.1 < 2";
  // The input logits are left as they were.
  EXPECT_FLOAT_EQ(l[1], 2.0f);
}

TEST(Sampler, LogitBiasIsValidated) {
  sampling_params p;
  p.logit_bias = {{5, 100.5f}};
  ASSERT_FALSE(p.validate());
  EXPECT_EQ(p.validate().error().rfind("logit_bias", 0), 0u);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(p.validate());
  p.logit_bias = {{5, -100.0f}};
  EXPECT_TRUE(p.validate());
}

// How well the default threshold separates paraphrases from related-but-different questions
// (tests/fixtures/paraphrases/pairs.tsv), with the real MiniLM embedder: a threshold table from
// the pairs' cosines, then the same questions through semantic_cache end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "cache/embed/minilm_embedder.hpp"
#include "cache/semantic/question_guard.hpp"
#include "cache/semantic/semantic_cache.hpp"
#include "tests/support/embedder_paths.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::cache;

namespace {

struct pair_case {
  bool should_hit = false;
  std::string a, b;
};

std::vector<pair_case> load_pairs() {
  std::ifstream in(troupe::test::fixture("paraphrases/pairs.tsv"));
  std::vector<pair_case> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string kind;
    pair_case p;
    std::getline(ls, kind, '\t');
    std::getline(ls, p.a, '\t');
    std::getline(ls, p.b, '\t');
    p.should_hit = kind == "hit";
    out.push_back(p);
  }
  return out;
}

std::unique_ptr<minilm_embedder> load_embedder() {
  embedder_options o;
  o.model_dir = troupe::test::embedder_dir();
  auto e = minilm_embedder::load(o);
  if (!e) throw std::runtime_error(e.error());
  return std::move(e.value());
}

}  // namespace

TEST(Paraphrases, ThresholdTable) {
  TROUPE_REQUIRE_EMBEDDER();
  const auto pairs = load_pairs();
  auto e = load_embedder();
  std::vector<float> hit_cos, miss_cos;
  std::vector<bool> hit_ok, miss_ok;  // what question_guard says
  std::vector<std::pair<float, std::string>> worst_hits, worst_misses;
  for (const auto& p : pairs) {
    auto va = e->embed(p.a), vb = e->embed(p.b);
    ASSERT_TRUE(va.ok() && vb.ok());
    const float c = dot(va.value().data(), vb.value().data(), e->dimension());
    (p.should_hit ? hit_cos : miss_cos).push_back(c);
    const auto g = may_share_answer(p.a, p.b);
    (p.should_hit ? hit_ok : miss_ok).push_back(g.ok);
    if (!g.ok && p.should_hit) std::printf("  guard refuses a paraphrase (%s): %s | %s\n", g.reason.c_str(), p.a.c_str(), p.b.c_str());
    (p.should_hit ? worst_hits : worst_misses).push_back({c, p.a + "  |  " + p.b});
  }
  ASSERT_GE(hit_cos.size(), 50u);
  ASSERT_GE(miss_cos.size(), 50u);
  const float def = semantic_cache_config().threshold;
  std::printf("paraphrases: %zu pairs that should hit, %zu that must not\n", hit_cos.size(), miss_cos.size());
  auto rate = [](const std::vector<float>& cos, const std::vector<bool>* ok, float th) {
    size_t n = 0;
    for (size_t i = 0; i < cos.size(); ++i) n += cos[i] >= th && (!ok || (*ok)[i]);
    return 100.0 * static_cast<double>(n) / static_cast<double>(cos.size());
  };
  std::printf("               cosine only              with question_guard\n");
  std::printf("  threshold  hit rate  false-hit rate  hit rate  false-hit rate\n");
  for (int t = 70; t <= 99; ++t) {
    const float th = t / 100.0f;
    std::printf("  %9.2f  %7.1f%%  %13.1f%%  %7.1f%%  %13.1f%%%s\n", th, rate(hit_cos, nullptr, th), rate(miss_cos, nullptr, th),
                rate(hit_cos, &hit_ok, th), rate(miss_cos, &miss_ok, th), std::abs(th - def) < 1e-4 ? "   <- default" : "");
  }
  std::sort(worst_hits.begin(), worst_hits.end());
  std::sort(worst_misses.rbegin(), worst_misses.rend());
  std::printf("  paraphrases with the lowest cosine:\n");
  for (size_t i = 0; i < 8; ++i) std::printf("    %.3f  %s\n", worst_hits[i].first, worst_hits[i].second.c_str());
  std::printf("  different questions with the highest cosine:\n");
  for (size_t i = 0; i < 16; ++i) std::printf("    %.3f  %s\n", worst_misses[i].first, worst_misses[i].second.c_str());
}

// Every question `a` is answered once (answer = a number of its own); then each `b` is looked up. A hit
// pair counts as a hit when b gets a's answer; a served answer is a false hit when b is from a
// miss pair, or when it is another question's answer.
TEST(Paraphrases, EndToEndAtTheDefaultThreshold) {
  TROUPE_REQUIRE_EMBEDDER();
  const auto pairs = load_pairs();
  troupe::test::temp_dir dir("paraphrases");
  semantic_cache_config cfg;
  cfg.path = dir.str("db");
  cfg.async_insert = false;
  semantic_cache c(cfg, load_embedder());
  ASSERT_TRUE(c.enabled()) << c.status();
  std::map<std::string, int32_t> answer_of;
  uint64_t id = 1;
  auto request = [&](const std::string& question) {
    auto r = cache_query::from_prompt(question);
    r.id = id++;
    r.model = "smollm2";
    r.max_tokens = 64;
    return r;
  };
  for (const auto& p : pairs) {
    if (answer_of.count(p.a)) continue;
    const int32_t ans = static_cast<int32_t>(answer_of.size());
    auto r = request(p.a);
    if (auto h = c.lookup(r)) {
      // A question of the set that is itself a paraphrase of an earlier one shares its answer.
      std::printf("  while filling: '%s' is answered by '%s' (%.3f)\n", p.a.c_str(), h->matched_prompt.c_str(), h->similarity);
      answer_of[p.a] = h->tokens.at(0);
      continue;
    }
    answer_of[p.a] = ans;
    finished_answer cs;
    cs.id = r.id;
    cs.finish_reason = "stop";
    cs.tokens = {ans};
    c.on_closed(cs);
  }
  int hit_pairs = 0, hits = 0, miss_pairs = 0, false_hits = 0, wrong_answers = 0;
  for (const auto& p : pairs) {
    auto h = c.lookup(request(p.b));
    if (p.should_hit) {
      ++hit_pairs;
      if (h && h->tokens == std::vector<int32_t>{answer_of[p.a]}) ++hits;
      else if (h) ++wrong_answers, std::printf("  wrong answer (%.3f): %s -> %s\n", h->similarity, p.b.c_str(), h->matched_prompt.c_str());
    } else {
      ++miss_pairs;
      if (h) ++false_hits, std::printf("  false hit (%.3f): %s -> %s\n", h->similarity, p.b.c_str(), h->matched_prompt.c_str());
    }
  }
  std::printf("paraphrases end to end at threshold %.2f: hit rate %.1f%% (%d/%d), false-hit rate %.1f%% (%d/%d), "
              "wrong answers to paraphrases %d\n",
              cfg.threshold, 100.0 * hits / hit_pairs, hits, hit_pairs, 100.0 * false_hits / miss_pairs, false_hits,
              miss_pairs, wrong_answers);
  // The default was chosen so that false hits stay rare: false hits are worse than misses.
  EXPECT_LE(false_hits + wrong_answers, miss_pairs / 20);
  EXPECT_GE(hits, hit_pairs / 3);
}

// The exact cache driven directly.
#include "cache/exact/exact_cache.hpp"

#include <gtest/gtest.h>

using namespace troupe::cache;

namespace {
cache_query areq(uint64_t id, std::vector<int32_t> prompt, float temperature = 0, uint64_t seed = 0) {
  cache_query r;
  r.id = id;
  r.model = "m";
  r.prompt = std::move(prompt);
  r.max_tokens = 8;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}
finished_answer closed(uint64_t id, std::vector<int32_t> toks, const std::string& reason) {
  finished_answer c;
  c.id = id;
  c.tokens = std::move(toks);
  c.finish_reason = reason;
  return c;
}
}  // namespace

TEST(exact_cache, stores_finished_answers_and_hits_exact_repeats) {
  exact_cache c({true, 2});
  EXPECT_EQ(c.lookup(areq(1, {1, 2, 3})), nullptr);
  c.on_closed(closed(1, {7, 8}, "length"));
  const auto* e = c.lookup(areq(2, {1, 2, 3}));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(c.lookup(areq(3, {1, 2, 4})), nullptr);   // another prompt
  auto other = areq(4, {1, 2, 3});
  other.max_tokens = 9;
  EXPECT_EQ(c.lookup(other), nullptr);                // other parameters
  auto st = c.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.lookups, 4);
}

TEST(exact_cache, only_reproducible_and_complete_answers) {
  exact_cache c({true, 8});
  EXPECT_EQ(c.lookup(areq(1, {1}, 0.8f, 0)), nullptr);
  c.on_closed(closed(1, {5}, "length"));
  EXPECT_EQ(c.lookup(areq(2, {1}, 0.8f, 0)), nullptr);  // unseeded sampling: never stored
  EXPECT_EQ(c.lookup(areq(3, {1}, 0.8f, 42)), nullptr);
  c.on_closed(closed(3, {5}, "length"));
  EXPECT_NE(c.lookup(areq(4, {1}, 0.8f, 42)), nullptr);  // seeded: reproducible
  EXPECT_EQ(c.lookup(areq(5, {2})), nullptr);
  c.on_closed(closed(5, {5}, "cancelled"));
  EXPECT_EQ(c.lookup(areq(6, {2})), nullptr);           // cancelled answers are partial
}

// `cache: false`: neither served from the cache nor stored in it, greedy or seeded alike.
TEST(exact_cache, a_refusing_request_is_neither_served_nor_stored) {
  exact_cache c({true, 8});
  EXPECT_EQ(c.lookup(areq(1, {1})), nullptr);
  c.on_closed(closed(1, {5}, "stop"));
  auto fresh = areq(2, {1});
  fresh.cache = cache_choice::refused;
  EXPECT_FALSE(exact_cache::cacheable(fresh));
  EXPECT_EQ(c.lookup(fresh), nullptr);  // stored, but not served
  c.on_closed(closed(2, {6}, "stop"));
  auto seeded = areq(3, {2}, 0.8f, 42);
  seeded.cache = cache_choice::refused;
  EXPECT_EQ(c.lookup(seeded), nullptr);
  c.on_closed(closed(3, {7}, "stop"));
  EXPECT_EQ(c.stats().stores, 1);
  EXPECT_EQ(c.stats().lookups, 1);  // the refusing ones were not looked up
  const auto* e = c.lookup(areq(4, {1}));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->tokens, (std::vector<int32_t>{5}));
  EXPECT_EQ(c.lookup(areq(5, {2}, 0.8f, 42)), nullptr);
}

TEST(exact_cache, evicts_least_recently_used) {
  exact_cache c({true, 2});
  for (uint64_t i = 1; i <= 2; ++i) {
    c.lookup(areq(i, {static_cast<int32_t>(i)}));
    c.on_closed(closed(i, {9}, "stop"));
  }
  EXPECT_NE(c.lookup(areq(10, {1})), nullptr);  // 1 is now the most recent
  c.lookup(areq(3, {3}));
  c.on_closed(closed(3, {9}, "stop"));
  EXPECT_EQ(c.lookup(areq(11, {2})), nullptr);
  EXPECT_NE(c.lookup(areq(12, {1})), nullptr);
  EXPECT_EQ(c.stats().entries, 2);
}

TEST(exact_cache, entries_are_scoped_to_the_tenant_unless_shared) {
  for (bool share : {false, true}) {
    exact_cache c({true, 8});
    auto a = areq(1, {1, 2, 3});
    a.tenant = "alice";
    a.share_across_tenants = share;
    ASSERT_EQ(c.lookup(a), nullptr);
    c.on_closed(closed(1, {7, 8}, "stop"));
    auto b = areq(2, {1, 2, 3});
    b.tenant = "bob";
    b.share_across_tenants = share;
    EXPECT_EQ(c.lookup(b) != nullptr, share) << "share_across_tenants " << share;
    auto again = areq(3, {1, 2, 3});
    again.tenant = "alice";
    again.share_across_tenants = share;
    EXPECT_NE(c.lookup(again), nullptr);
    // An answer made under a structured-output constraint serves only that constraint.
    auto constrained = again;
    constrained.id = 4;
    constrained.constraint_kind = "json_object";
    EXPECT_EQ(c.lookup(constrained), nullptr);
  }
}

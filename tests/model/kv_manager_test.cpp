#include "model/kv_manager.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace troupe::model;

TEST(KvBlockPool, AllocatesUntilEmptyAndReusesFreedBlocks) {
  kv_block_pool p(3);
  auto a = p.allocate(), b = p.allocate(), c = p.allocate();
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(p.allocate().has_value());
  EXPECT_EQ(p.available(), 0);
  p.release(*b);
  EXPECT_EQ(p.available(), 1);
  EXPECT_EQ(*p.allocate(), *b);
}

TEST(KvBlockPool, CachedBlocksAreSharedAndEvictedLeastRecentlyUsedFirst) {
  kv_block_pool p(2);
  auto a = *p.allocate(), b = *p.allocate();
  p.set_hash(a, 111);
  p.set_hash(b, 222);
  p.release(a);
  p.release(b);
  EXPECT_EQ(p.available(), 2);
  EXPECT_EQ(p.cached(), 2);
  auto hit = p.acquire_cached(222);  // b becomes most recently used and referenced
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, b);
  EXPECT_EQ(p.refcount(b), 1);
  auto fresh = p.allocate();  // must evict a (the only unreferenced cached block)
  ASSERT_TRUE(fresh);
  EXPECT_EQ(*fresh, a);
  EXPECT_FALSE(p.contains(111));
  EXPECT_TRUE(p.contains(222));
  p.release(*fresh);
  EXPECT_THROW(p.release(*fresh), std::logic_error) << "double release";
}

TEST(KvManager, ReserveIsAllOrNothingAndReportsWaste) {
  kv_manager m(4, 16, false);
  m.add_sequence(1, {});
  EXPECT_TRUE(m.reserve(1, 20));  // 2 blocks
  EXPECT_EQ(m.block_table(1).size(), 2u);
  auto u = m.usage();
  EXPECT_EQ(u.blocks_used, 2);
  EXPECT_EQ(u.tokens_stored, 20);
  EXPECT_EQ(u.slots_wasted, 12);
  m.add_sequence(2, {});
  EXPECT_FALSE(m.reserve(2, 40));  // needs 3, only 2 left: nothing taken
  EXPECT_EQ(m.usage().blocks_used, 2);
  EXPECT_TRUE(m.reserve(2, 32));
  m.free_sequence(1);
  m.free_sequence(2);
  EXPECT_EQ(m.pool().available(), 4);
}

TEST(KvManager, PrefixCachingSharesFullBlocksOfTheSamePrompt) {
  kv_manager m(16, 4, true);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(m.add_sequence(1, prompt), 0);
  ASSERT_TRUE(m.reserve(1, 10));
  m.commit(1, prompt, 10);  // blocks 0 and 1 are full and hashed
  auto other = prompt;
  other[9] = 99;
  EXPECT_EQ(m.add_sequence(2, other), 8);  // shares two full blocks
  EXPECT_EQ(m.block_table(2)[0], m.block_table(1)[0]);
  EXPECT_EQ(m.block_table(2)[1], m.block_table(1)[1]);
  EXPECT_EQ(m.pool().refcount(m.block_table(1)[0]), 2);
  auto diverging = prompt;
  diverging[2] = 77;
  EXPECT_EQ(m.add_sequence(3, diverging), 0) << "a different first block shares nothing";
  // A prompt that is exactly the cached blocks keeps its last token to compute.
  std::vector<int32_t> exact(prompt.begin(), prompt.begin() + 8);
  EXPECT_EQ(m.add_sequence(4, exact), 4);
  m.free_sequence(1);
  m.free_sequence(2);
  m.free_sequence(3);
  m.free_sequence(4);
  EXPECT_EQ(m.pool().available(), 16);
  EXPECT_EQ(m.add_sequence(5, prompt), 8) << "cached blocks survive their sequences until evicted";
  m.free_sequence(5);
}

TEST(KvManager, RandomChurnNeverLeaksBlocks) {
  kv_manager m(64, 16, true);
  std::mt19937 rng(7);
  std::vector<uint64_t> live;
  for (uint64_t id = 0; id < 3000; ++id) {
    if (!live.empty() && rng() % 3 == 0) {
      size_t k = rng() % live.size();
      m.free_sequence(live[k]);
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    std::vector<int32_t> prompt(rng() % 80 + 1);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 4);  // small alphabet: many shared prefixes
    m.add_sequence(id, prompt);
    if (m.reserve(id, static_cast<int32_t>(prompt.size()) + 8)) {
      m.commit(id, prompt, static_cast<int32_t>(prompt.size()));
      live.push_back(id);
    } else {
      m.free_sequence(id);
    }
  }
  for (auto id : live) m.free_sequence(id);
  EXPECT_EQ(m.pool().available(), 64);
  EXPECT_EQ(m.pool().referenced(), 0);
}

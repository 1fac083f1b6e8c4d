#include "cache/semantic/vector_index.hpp"

#include <gtest/gtest.h>

#include <random>

#include "cache/embed/embedder.hpp"

using namespace troupe::cache;

namespace {

std::vector<float> random_unit(std::mt19937& rng, int dim) {
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(dim));
  for (auto& x : v) x = nd(rng);
  l2_normalize(v);
  return v;
}

index_options small(size_t flat_limit) {
  index_options o;
  o.dimension = 32;
  o.flat_limit = flat_limit;
  return o;
}

}  // namespace

TEST(VectorIndex, FlatSearchIsExactAndSupportsRemoval) {
  std::mt19937 rng(1);
  vector_index idx(small(1000));
  std::vector<std::vector<float>> vs;
  for (uint64_t i = 1; i <= 50; ++i) {
    vs.push_back(random_unit(rng, 32));
    idx.add(i, vs.back().data());
  }
  EXPECT_FALSE(idx.uses_graph());
  auto r = idx.search(vs[9].data(), 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].label, 10u);
  EXPECT_NEAR(r[0].similarity, 1.0f, 1e-5);
  EXPECT_GE(r[0].similarity, r[1].similarity);
  idx.remove(10);
  idx.remove(1);
  EXPECT_EQ(idx.size(), 48u);
  EXPECT_FALSE(idx.contains(10));
  r = idx.search(vs[9].data(), 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].label, 10u);
  // The last row moved into a hole is still found.
  r = idx.search(vs[49].data(), 1);
  EXPECT_EQ(r[0].label, 50u);
}

TEST(VectorIndex, SwitchesToHnswAndKeepsFindingEntries) {
  std::mt19937 rng(2);
  vector_index idx(small(64));
  std::vector<std::vector<float>> vs;
  for (uint64_t i = 1; i <= 2000; ++i) {
    vs.push_back(random_unit(rng, 32));
    idx.add(i, vs.back().data());
  }
  EXPECT_TRUE(idx.uses_graph());
  int found = 0;
  for (uint64_t i = 1; i <= 2000; i += 7) {
    auto r = idx.search(vs[i - 1].data(), 1);
    found += !r.empty() && r[0].label == i;
  }
  EXPECT_GE(found, 280);  // of 286: recall of an entry's own vector
  for (uint64_t i = 1; i <= 1000; ++i) idx.remove(i);
  EXPECT_EQ(idx.size(), 1000u);
  for (uint64_t i = 1; i <= 1000; i += 50) {
    auto r = idx.search(vs[i - 1].data(), 5);
    for (const auto& n : r) EXPECT_GT(n.label, 1000u);
  }
  // Enough deletions rebuild the graph from the live vectors.
  for (uint64_t i = 1001; i <= 1990; ++i) idx.remove(i);
  EXPECT_EQ(idx.size(), 10u);
  for (uint64_t i = 1991; i <= 2000; ++i) {
    auto r = idx.search(vs[i - 1].data(), 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].label, i);
  }
  // Re-adding a removed label works in graph mode too.
  idx.add(5, vs[4].data());
  EXPECT_EQ(idx.search(vs[4].data(), 1)[0].label, 5u);
}

TEST(VectorIndex, EmptyAndZeroK) {
  vector_index idx(small(8));
  std::vector<float> q(32, 0.0f);
  q[0] = 1;
  EXPECT_TRUE(idx.search(q.data(), 3).empty());
  idx.add(1, q.data());
  EXPECT_TRUE(idx.search(q.data(), 0).empty());
  idx.remove(99);  // unknown: nothing happens
  EXPECT_EQ(idx.size(), 1u);
}

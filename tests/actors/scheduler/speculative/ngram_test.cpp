// The ngram proposer (prompt lookup) and the proposer registry.
#include <gtest/gtest.h>

#include "actors/scheduler/speculative/proposer.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {
std::unique_ptr<proposer> make(int32_t lo, int32_t hi) {
  speculative_config c;
  c.ngram_min = lo;
  c.ngram_max = hi;
  auto p = proposer_registry().make("ngram", c);
  EXPECT_TRUE(p.ok()) << p.error();
  return std::move(p.value());
}
}  // namespace

TEST(ngram, proposes_what_followed_the_most_recent_earlier_occurrence_of_the_tail) {
  auto p = make(2, 3);
  EXPECT_EQ(p->name(), "ngram");
  //                    0  1  2  3  4  5  6  7  8  9 10 11
  std::vector<int32_t> c{1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3};
  // Tail [1 2 3] (n = 3) occurs at 0: followed by 4 5 9.
  EXPECT_EQ(p->propose(1, c, 3), (std::vector<int32_t>{4, 5, 9}));
  EXPECT_EQ(p->propose(1, c, 1), (std::vector<int32_t>{4}));
  // With only n = 2: [2 3] most recently at 6, followed by 7 8 1.
  auto q = make(2, 2);
  EXPECT_EQ(q->propose(1, c, 3), (std::vector<int32_t>{7, 8, 1}));
  // The proposal stops at the end of what is known.
  EXPECT_EQ(q->propose(1, {5, 6, 7, 5, 6}, 8), (std::vector<int32_t>{7, 5, 6}));
}

TEST(ngram, proposes_nothing_without_a_match_or_room) {
  auto p = make(2, 4);
  EXPECT_TRUE(p->propose(1, {1, 2, 3, 4, 5, 6}, 4).empty());
  EXPECT_TRUE(p->propose(1, {1, 2}, 4).empty());
  EXPECT_TRUE(p->propose(1, {}, 4).empty());
  EXPECT_TRUE(p->propose(1, {1, 2, 1, 2}, 0).empty());
  // A tail shorter than ngram_min never matches on its own.
  EXPECT_TRUE(make(3, 4)->propose(1, {7, 1, 2, 9, 9, 1, 2}, 4).empty());
}

TEST(speculative_config, ranges_and_unknown_methods_are_named) {
  speculative_config c;
  EXPECT_TRUE(check_speculative_config(c).ok());
  c.method = "ngram";
  EXPECT_TRUE(check_speculative_config(c).ok());
  c.method = "eagle";
  auto s = check_speculative_config(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("'eagle'"), std::string::npos) << s.error();
  EXPECT_NE(s.error().find("ngram"), std::string::npos) << s.error();
  c.method = "off";
  c.ngram_min = 5;
  c.ngram_max = 3;
  s = check_speculative_config(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("ngram_min"), std::string::npos) << s.error();
  c.ngram_min = 2;
  c.k = 0;
  s = check_speculative_config(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("speculative.k"), std::string::npos) << s.error();
}

// The suffix proposer: the request's own tokens, the outputs of ended requests (shared by the
// instance, bounded and evicted oldest first), frequency-weighted variable-length guesses.
#include <gtest/gtest.h>

#include "actors/scheduler/speculative/proposer.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {
std::unique_ptr<proposer> make(int32_t min_match = 2) {
  speculative_config c;
  c.ngram_min = min_match;
  auto p = proposer_registry().make("suffix", c);
  EXPECT_TRUE(p.ok()) << p.error();
  return std::move(p.value());
}

std::vector<int32_t> seq_of(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
}  // namespace

TEST(suffix, is_registered_and_proposes_from_the_requests_own_tokens) {
  auto p = make();
  EXPECT_EQ(p->name(), "suffix");
  //                    0  1  2  3  4  5  6  7  8
  std::vector<int32_t> c{1, 2, 3, 4, 5, 9, 8, 1, 2};
  // Tail [1 2] occurred once before, followed by 3 4 5 ...; the guess is at most 2 per matched token.
  EXPECT_EQ(p->propose(1, c, 8), (std::vector<int32_t>{3, 4, 5, 9}));
  EXPECT_EQ(p->propose(1, c, 2), (std::vector<int32_t>{3, 4}));
  // The sequence grows: the trie follows it without starting again.
  c.push_back(3);
  EXPECT_EQ(p->propose(1, c, 3), (std::vector<int32_t>{4, 5, 9}));
}

TEST(suffix, proposes_nothing_without_a_match_or_room) {
  auto p = make();
  EXPECT_TRUE(p->propose(1, {1, 2, 3, 4, 5, 6}, 4).empty());
  EXPECT_TRUE(p->propose(2, {}, 4).empty());
  EXPECT_TRUE(p->propose(3, {1, 2, 1, 2}, 0).empty());
  // A tail shorter than the minimum match never matches on its own.
  EXPECT_TRUE(make(3)->propose(1, {7, 1, 2, 9, 9, 1, 2}, 4).empty());
}

TEST(suffix, follows_the_most_frequent_continuation_not_the_most_recent) {
  auto p = make();
  // [5 6] was followed by 7 twice and by 8 once (most recently).
  auto c = seq_of({{5, 6, 7, 1}, {5, 6, 7, 2}, {5, 6, 8, 3}, {5, 6}});
  auto g = p->propose(1, c, 1);
  EXPECT_EQ(g, (std::vector<int32_t>{7}));
  // ngram (recency) says 8 here: the two differ by design.
  auto n = proposer_registry().make("ngram", speculative_config{});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value()->propose(1, c, 1), (std::vector<int32_t>{8}));
}

TEST(suffix, the_guess_shortens_where_the_continuations_disagree) {
  auto p = make();
  // After [1 2]: 3 always, then each of 4..14 once: the path's frequency falls to 1/11 after 3,
  // below what is worth proposing (0.1).
  std::vector<int32_t> c;
  for (int32_t x = 4; x <= 14; ++x) c = seq_of({c, {1, 2, 3, x, 100 + x}});
  c = seq_of({c, {1, 2}});
  EXPECT_EQ(p->propose(1, c, 4), (std::vector<int32_t>{3}));
}

TEST(suffix, learns_from_ended_requests_outputs_only) {
  auto p = make();
  // Request 1: prompt [40 41 42], output [10 11 12 13 14].
  p->on_end(1, {40, 41, 42, 10, 11, 12, 13, 14}, 3);
  // Request 2 has never seen 10 11 itself: the shared trie answers.
  EXPECT_EQ(p->propose(2, {50, 10, 11}, 3), (std::vector<int32_t>{12, 13, 14}));
  // The prompt was not kept.
  EXPECT_TRUE(p->propose(3, {60, 40, 41}, 3).empty());
  // Another instance (another scheduler) shares nothing with this one.
  EXPECT_TRUE(make()->propose(2, {50, 10, 11}, 3).empty());
}

TEST(suffix, the_shared_history_is_bounded_and_evicts_the_oldest_first) {
  auto p = make();
  p->on_end(1, {900, 901, 902, 903}, 0);  // the oldest: evicted below
  EXPECT_EQ(p->propose(9, {900, 901}, 2), (std::vector<int32_t>{902, 903}));
  // 80K tokens of other outputs (more than the 64K kept), in requests of 1K distinct tokens.
  for (int32_t r = 0; r < 80; ++r) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < 1024; ++i) out.push_back(1000 + (r * 1024 + i) % 30000);
    p->on_end(static_cast<uint64_t>(10 + r), out, 0);
  }
  EXPECT_TRUE(p->propose(9, {900, 901}, 2).empty());
  // A recent one is still there.
  const int32_t base = 1000 + (79 * 1024) % 30000;
  EXPECT_EQ(p->propose(9, {base, base + 1}, 2), (std::vector<int32_t>{base + 2, base + 3}));
}

TEST(suffix, an_ended_sequences_own_state_is_forgotten) {
  auto p = make();
  EXPECT_EQ(p->propose(1, {1, 2, 3, 1, 2}, 1), (std::vector<int32_t>{3}));
  p->on_end(1, {1, 2, 3, 1, 2}, 5);  // all prompt: nothing is shared
  // The same id again (a new sequence): none of the old tokens count ([1 2] was followed by 3).
  EXPECT_EQ(p->propose(1, {1, 2, 8, 8, 8, 1, 2}, 1), (std::vector<int32_t>{8}));
}

// lookup_bound: the most accepted guesses any prompt-lookup proposer could have had on a given
// output, against hand-counted steps, and against what the ngram proposer really keeps.
#include <gtest/gtest.h>

#include "actors/scheduler/speculative/lookup_bound.hpp"
#include "actors/scheduler/speculative/proposer.hpp"

using namespace troupe::actors;

namespace {

// Decodes `output` after `prompt` as the scheduler does with a proposer: each step guesses up to
// k tokens, keeps the prefix the output agrees with, and adds the model's own token. The steps.
int64_t steps_with(proposer& p, const std::vector<int32_t>& prompt, const std::vector<int32_t>& output, int32_t k) {
  std::vector<int32_t> ctx(prompt);
  size_t i = 0;
  int64_t steps = 0;
  while (i < output.size()) {
    const auto guess = p.propose(1, ctx, k);
    size_t a = 0;
    while (a < guess.size() && i + a < output.size() && guess[a] == output[i + a]) ++a;
    const size_t adv = std::min(a + 1, output.size() - i);
    ctx.insert(ctx.end(), output.begin() + static_cast<long>(i), output.begin() + static_cast<long>(i + adv));
    i += adv;
    ++steps;
  }
  return steps;
}

}  // namespace

TEST(lookup_bound, a_copied_prompt_takes_its_guesses_once_the_copy_can_be_matched) {
  const std::vector<int32_t> text = {1, 2, 3, 4, 5, 6, 7, 8};
  // Positions 0 and 1 have no earlier occurrence of their last two tokens ("7 8", "8 1"); from
  // position 2 ("1 2" in the prompt) four guesses a step: 2 -> 7 in one step, then 7 -> 8.
  const auto b = lookup_bound(text, text, 2, 4);
  EXPECT_EQ(b.tokens, 8);
  EXPECT_EQ(b.steps, 4);
  EXPECT_EQ(b.guessed(), 4);
  EXPECT_DOUBLE_EQ(b.tokens_per_step(), 2.0);
  // With k = 8 the copy from position 2 is one step.
  EXPECT_EQ(lookup_bound(text, text, 2, 8).steps, 3);
}

TEST(lookup_bound, text_that_repeats_nothing_gives_no_guess) {
  const auto b = lookup_bound({1, 2, 3}, {4, 5, 6, 7, 8}, 1, 4);
  EXPECT_EQ(b.steps, 5);
  EXPECT_EQ(b.guessed(), 0);
  EXPECT_EQ(lookup_bound({}, {}, 2, 4).steps, 0);
}

TEST(lookup_bound, the_oracle_picks_the_occurrence_that_agrees_where_ngram_takes_the_latest) {
  // "7 8" occurs twice in the prompt: first followed by 1 2 3 (what the output goes on with),
  // then by 9 9 9. ngram follows the most recent occurrence and is rejected; the bound is not.
  const std::vector<int32_t> prompt = {7, 8, 1, 2, 3, 7, 8, 9, 9, 9, 5};
  const std::vector<int32_t> output = {7, 8, 1, 2, 3};
  const auto b = lookup_bound(prompt, output, 2, 4);
  EXPECT_EQ(b.steps, 3);  // 7, 8, then 1 2 3 in one step
  speculative_config c;
  c.ngram_min = 2;
  c.ngram_max = 2;
  auto ngram = proposer_registry().make("ngram", c);
  ASSERT_TRUE(ngram.ok()) << ngram.error();
  // 7, 8, then "9 9 9 5" rejected (1 from the model), then "8 1" finds 2 3: a step more.
  EXPECT_EQ(steps_with(*ngram.value(), prompt, output, 4), 4);
}

TEST(lookup_bound, no_lookup_proposer_beats_it_and_it_grows_with_k_and_shorter_matches) {
  // A text that half-copies its prompt, with edits: what ngram and suffix really take is never
  // fewer steps than the bound, and the bound never rises with more room (k) or shorter n.
  std::vector<int32_t> prompt, output;
  for (int32_t i = 0; i < 60; ++i) prompt.push_back(100 + i % 23);
  for (int32_t i = 0; i < 80; ++i) output.push_back(i % 7 == 3 ? 500 + i : 100 + (i * 3) % 23);
  for (const char* method : {"ngram", "suffix"}) {
    speculative_config c;
    auto p = proposer_registry().make(method, c);
    ASSERT_TRUE(p.ok()) << p.error();
    EXPECT_GE(steps_with(*p.value(), prompt, output, c.k), lookup_bound(prompt, output, c.ngram_min, c.k).steps) << method;
  }
  EXPECT_LE(lookup_bound(prompt, output, 2, 8).steps, lookup_bound(prompt, output, 2, 4).steps);
  EXPECT_LE(lookup_bound(prompt, output, 1, 4).steps, lookup_bound(prompt, output, 2, 4).steps);
}

TEST(lookup_bound, the_first_token_comes_from_the_prefill_without_a_guess) {
  // The prompt ends "1 2" and holds "1 2 3 4" earlier: a guess at position 0 would find "3 4",
  // but the first token is the prefill's own, and the second is the last: two steps.
  const auto b = lookup_bound({1, 2, 3, 4, 9, 1, 2}, {3, 4}, 2, 4);
  EXPECT_EQ(b.steps, 2);
  EXPECT_EQ(b.guessed(), 0);
}

#pragma once
// How many of a generated text's tokens any prompt-lookup proposer could have had accepted: the
// ceiling that `troupe bench spec` prints beside what ngram and suffix kept (issue 23), so that
// a speedup target is weighed against what the model's own output allows.
//
// A lookup proposer (ngram, suffix over the request's own tokens) guesses what followed an
// earlier occurrence of the sequence's last tokens. The bound lets an oracle choose, at every
// step, among all earlier occurrences of the last n_min tokens (every longer match is one of
// them) the one whose next k tokens agree longest with what the model generated, and then
// chooses the steps' lengths so that the whole output takes the fewest steps. A step yields its
// accepted guesses plus the model's own token, so tokens / steps is the most a step can yield on
// average, and the speedup of speculation can exceed it only where a guess costs nothing.
#include <cstdint>
#include <vector>

namespace troupe::actors {

struct lookup_bound_result {
  int64_t tokens = 0;  // the output's length
  int64_t steps = 0;   // the fewest decode steps any lookup proposer could have taken
  int64_t guessed() const { return tokens - steps; }  // tokens that came from accepted guesses
  double tokens_per_step() const { return steps > 0 ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0; }
};

// `output` generated after `prompt`; guesses of at most k tokens, found by matching the last
// n_min >= 1 tokens of the prompt and output so far.
lookup_bound_result lookup_bound(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                 int32_t n_min, int32_t k);

}  // namespace troupe::actors

#include "actors/scheduler/speculative/lookup_bound.hpp"

#include <algorithm>
#include <limits>

namespace troupe::actors {

lookup_bound_result lookup_bound(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                 int32_t n_min, int32_t k) {
  const auto n_out = static_cast<int64_t>(output.size());
  const int64_t n = std::max<int32_t>(1, n_min);
  std::vector<int32_t> ctx(prompt);
  ctx.insert(ctx.end(), output.begin(), output.end());
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  // best[i]: the longest run of guesses accepted at output position i (the context being the
  // prompt and output[0, i)): over every earlier occurrence of its last n tokens, how far the
  // tokens after that occurrence agree with output[i, ...), at most k.
  std::vector<int64_t> best(static_cast<size_t>(n_out), 0);
  // Position 0 stays 0: the first token comes from the prompt's prefill, where nothing guesses.
  for (int64_t i = 1; i < n_out; ++i) {
    const int64_t size = n_prompt + i;  // tokens known at position i
    if (size < n + 1) continue;         // no earlier occurrence can be followed by a token
    const int32_t* tail = ctx.data() + (size - n);
    int64_t b = 0;
    for (int64_t j = 0; j + n < size && b < k; ++j) {
      if (!std::equal(tail, tail + n, ctx.data() + j)) continue;
      int64_t a = 0;  // the guess is ctx[j + n, j + n + k), cut at what was known (size)
      while (a < k && j + n + a < size && i + a < n_out && ctx[static_cast<size_t>(j + n + a)] == output[static_cast<size_t>(i + a)]) ++a;
      b = std::max(b, a);
    }
    best[static_cast<size_t>(i)] = b;
  }
  // fewest[i]: the fewest steps from position i to the end. A step at i may yield 1 to
  // best[i] + 1 tokens (an oracle may guess fewer), so this is a shortest path, not a greedy jump.
  std::vector<int64_t> fewest(static_cast<size_t>(n_out + 1), 0);
  for (int64_t i = n_out - 1; i >= 0; --i) {
    int64_t f = std::numeric_limits<int64_t>::max();
    for (int64_t adv = 1; adv <= best[static_cast<size_t>(i)] + 1 && i + adv <= n_out; ++adv)
      f = std::min(f, 1 + fewest[static_cast<size_t>(i + adv)]);
    fewest[static_cast<size_t>(i)] = f;
  }
  return {n_out, fewest[0]};
}

}  // namespace troupe::actors

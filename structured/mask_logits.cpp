#include "structured/mask_logits.hpp"

#include <algorithm>
#include <limits>

namespace troupe::structured {

void mask_logits(matcher& m, float* logits, int32_t n_vocab, const std::vector<int32_t>& eog,
                 std::vector<uint64_t>& mask, int64_t remaining) {
  const bool must_end = m.must_end();
  const int64_t need = must_end ? 0 : m.min_bytes_to_end();
  // Closing only where something is left to close: an output that may end here (free text, a
  // finished value followed by optional whitespace) is not cut short by the budget, it goes on
  // as the model likes while every token keeps it closable.
  const bool closing = remaining > 0 && !must_end && need > 0 && remaining - 1 <= need + closing_margin;
  if (closing) {
    m.closing_tokens(mask);
  } else if (!must_end) {
    m.allowed_tokens(mask);
    // One token can push the way out far off (an object begun where null was the way out, in a
    // recursive schema): near the budget's end, tokens after which the output could no longer
    // close in the tokens left go. The closing tokens then need at most one token a byte and the
    // end token: after this one, remaining - 1 tokens, so at most remaining - 2 bytes; the last
    // token may still be one after which the output is complete (it ends at the budget).
    if (remaining > 0 && remaining - 1 <= need + closing_margin + m.max_entry_bytes())
      m.drop_tokens_past(mask, std::max<int64_t>(remaining - 2, 0));
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> kept;  // the eog tokens' own logits, put back where ending is allowed
  kept.reserve(eog.size());
  for (auto t : eog) kept.push_back(t >= 0 && t < n_vocab ? logits[t] : ninf);
  bool any = false;
  for (int32_t w = 0; w * 64 < n_vocab; ++w) {
    const uint64_t word = must_end || static_cast<size_t>(w) >= mask.size() ? 0 : mask[static_cast<size_t>(w)];
    if (word == ~uint64_t{0}) {
      any = true;
      continue;
    }
    any = any || word != 0;
    const int32_t lo = w * 64, hi = std::min(n_vocab, lo + 64);
    for (int32_t t = lo; t < hi; ++t)
      if (!((word >> (t - lo)) & 1)) logits[t] = ninf;
  }
  if (m.can_end() || !any)
    for (size_t i = 0; i < eog.size(); ++i)
      if (eog[i] >= 0 && eog[i] < n_vocab) logits[eog[i]] = kept[i];
}

}  // namespace troupe::structured

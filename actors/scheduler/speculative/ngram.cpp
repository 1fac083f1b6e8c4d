// `ngram`: prompt lookup. The last n tokens of the sequence (n from ngram_max down to
// ngram_min, the longest first) are looked up in the sequence's own earlier tokens; the tokens
// that followed the most recent earlier occurrence are the guess. Pays where the output quotes
// or edits its input: rewrites, code edits, JSON filled from given text, repeated answers.
// Keeps no state: a linear scan per step costs microseconds next to a model step.
#include <algorithm>

#include "actors/scheduler/speculative/proposer.hpp"

namespace troupe::actors::proposers {
namespace {

class ngram final : public proposer {
 public:
  explicit ngram(const speculative_config& c) : min_(c.ngram_min), max_(c.ngram_max) {}
  std::string name() const override { return "ngram"; }

  std::vector<int32_t> propose(uint64_t, const std::vector<int32_t>& ctx, int32_t max_k) override {
    const auto size = static_cast<int64_t>(ctx.size());
    if (max_k <= 0) return {};
    for (int64_t n = std::min<int64_t>(max_, size - 1); n >= min_; --n) {
      const int32_t* tail = ctx.data() + (size - n);
      // The most recent earlier occurrence (it must be followed by at least one token).
      for (int64_t i = size - n - 1; i >= 0; --i) {
        if (ctx[static_cast<size_t>(i)] != tail[0] || !std::equal(tail, tail + n, ctx.data() + i)) continue;
        const int64_t from = i + n, to = std::min(size, from + max_k);
        return {ctx.begin() + from, ctx.begin() + to};
      }
    }
    return {};
  }

 private:
  int64_t min_, max_;
};

}  // namespace

void add_ngram(named_registry<proposer_factory>& r) {
  (void)r.add("ngram", [](const speculative_config& c) -> result<std::unique_ptr<proposer>> {
    return std::unique_ptr<proposer>(new ngram(c));
  });
}

}  // namespace troupe::actors::proposers

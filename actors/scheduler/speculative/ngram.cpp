// `ngram`: prompt lookup. The last n tokens of the sequence (n from ngram_max down to
// ngram_min, the longest first) are looked up in the sequence's own earlier tokens; the tokens
// that followed an earlier occurrence are the guess. Pays where the output quotes or edits its
// input: rewrites, code edits, JSON filled from given text, repeated answers.
//
// Which occurrence: a copy goes through its source in order, so each sequence keeps a copy
// pointer, the source position its output has reached (where its last guess came from, moved
// on by as many of the tokens since as match the source). Among occurrences of the longest
// matching tail, the one whose continuation lies at or just after the pointer wins, else the most
// recent; and near the pointer a single token is enough to guess on (where the output left the
// source for a word and came back to it, a tail of ngram_min tokens may not be there yet).
// Measured on `troupe bench spec`'s copy prompts (bench/README.md): more guesses kept for as many
// made; a single-token match anywhere, as ngram_min = 1 would allow, makes many wrong guesses.
// A linear scan per step costs microseconds next to a model step.
#include <algorithm>
#include <unordered_map>

#include "actors/scheduler/speculative/proposer.hpp"

namespace troupe::actors::proposers {
namespace {

// How far past the copy pointer an occurrence may continue and still count as near it (a word or
// two the output skipped).
constexpr int64_t k_near_pointer = 8;
// More sequences in flight than any scheduler runs: past it the pointers are forgotten (they
// are a hint; on_end forgets each as its sequence ends).
constexpr size_t k_max_tracked = 1 << 16;

class ngram final : public proposer {
 public:
  explicit ngram(const speculative_config& c) : min_(c.ngram_min), max_(c.ngram_max) {}
  std::string name() const override { return "ngram"; }

  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& ctx, int32_t max_k) override {
    if (max_k <= 0) return {};
    auto& st = track(seq);
    follow(st, ctx);
    const int64_t from = find(ctx, st.pointer);
    if (from < 0) return {};
    const int64_t to = std::min(static_cast<int64_t>(ctx.size()), from + max_k);
    st.guessed_at = static_cast<int64_t>(ctx.size());
    st.source = from;
    st.pointer = from;
    return {ctx.begin() + from, ctx.begin() + to};
  }

  // Without moving the pointer: asked between steps, before the tokens in flight are known.
  bool expects_guess(uint64_t seq, const std::vector<int32_t>& ctx) override {
    const auto it = seqs_.find(seq);
    state st = it == seqs_.end() ? state{} : it->second;
    follow(st, ctx);
    const int64_t from = find(ctx, st.pointer);
    return from >= 0 && from < static_cast<int64_t>(ctx.size());
  }

  void on_end(uint64_t seq, const std::vector<int32_t>&, int32_t) override { seqs_.erase(seq); }

 private:
  struct state {
    int64_t pointer = -1;     // the source position the output has reached; -1: none yet
    int64_t guessed_at = -1;  // the context's length at the last guess
    int64_t source = -1;      // where that guess was taken from
  };

  state& track(uint64_t seq) {
    if (seqs_.size() >= k_max_tracked && !seqs_.count(seq)) seqs_.clear();
    return seqs_[seq];
  }

  // Moves the pointer over the tokens added since the last guess that match its source.
  static void follow(state& st, const std::vector<int32_t>& ctx) {
    const auto size = static_cast<int64_t>(ctx.size());
    if (size < st.guessed_at) st = state{};  // not a continuation of what was seen: start over
    if (st.guessed_at < 0) return;
    int64_t a = 0;
    while (st.guessed_at + a < size &&
           ctx[static_cast<size_t>(st.guessed_at + a)] == ctx[static_cast<size_t>(st.source + a)])
      ++a;
    st.pointer = st.source + a;
    st.guessed_at = size;
    st.source = st.pointer;
  }

  // Where the guess starts (the position after the chosen occurrence), or -1.
  int64_t find(const std::vector<int32_t>& ctx, int64_t pointer) const {
    const auto size = static_cast<int64_t>(ctx.size());
    for (int64_t n = std::min<int64_t>(max_, size - 1); n >= 1; --n) {
      const int32_t* tail = ctx.data() + (size - n);
      int64_t recent = -1, near = -1;
      // Earlier occurrences, most recent first (each must be followed by at least one token).
      for (int64_t i = size - n - 1; i >= 0; --i) {
        if (ctx[static_cast<size_t>(i)] != tail[0] || !std::equal(tail, tail + n, ctx.data() + i)) continue;
        if (recent < 0) recent = i + n;
        if (pointer < 0) break;
        if (i + n < pointer) break;  // the rest lie before the pointer
        if (i + n - pointer <= k_near_pointer) near = i + n;  // found last: the nearest
      }
      if (near >= 0) return near;
      if (recent >= 0 && n >= min_) return recent;
    }
    return -1;
  }

  int64_t min_, max_;
  std::unordered_map<uint64_t, state> seqs_;
};

}  // namespace

void add_ngram(named_registry<proposer_factory>& r) {
  (void)r.add("ngram", [](const speculative_config& c) -> result<std::unique_ptr<proposer>> {
    return std::unique_ptr<proposer>(new ngram(c));
  });
}

}  // namespace troupe::actors::proposers

// `suffix`: suffix decoding (arXiv 2411.04975's idea). Two suffix tries over token windows,
// each node counting how often its path occurred:
//   - one per sequence, over the request's own tokens (prompt, then output), grown as it decodes;
//   - one shared by every sequence this proposer serves, over the outputs of recent requests,
//     bounded to kGlobalTokens tokens and evicted oldest request first (counts taken back, empty
//     nodes freed).
// A proposal: the longest suffix of the sequence (ngram_min..kDepth-k tokens) found in a trie,
// then from its node the most frequent child, again and again, while the product of the
// conditional frequencies stays at least kMinProb; at most min(k, kAlpha * match length) tokens.
// Both tries are asked; the guess with the larger expected number of accepted tokens (the sum of
// those products) wins. Repeated answers and agent/tool loops are where the shared trie pays;
// quoting the prompt is where the request's own does (like ngram, but by frequency, not recency).
//
// The instance lives in its scheduler's state (scheduler_state::proposers_), one per replica:
// the shared trie is per scheduler, never process-wide. Written by hand: no Debian/PyPI library
// offers a count-carrying, evictable token trie; the structure is ~150 lines.
#include <algorithm>
#include <deque>
#include <unordered_map>

#include "actors/scheduler/speculative/proposer.hpp"

namespace troupe::actors::proposers {
namespace {

// Longest window stored (match + continuation): a per-sequence trie holds up to kDepth
// nodes per token, so this bounds its memory too.
constexpr int32_t kDepth = 16;
constexpr int64_t kGlobalTokens = 64 * 1024;   // outputs kept in the shared trie
constexpr double kMinProb = 0.1;               // stop guessing below this path frequency
constexpr int32_t kAlpha = 2;                  // at most kAlpha tokens per matched token

// A trie of token windows with occurrence counts, in an arena (indices stay valid; freed nodes
// are reused). Children sit in a small vector: most nodes have one or two.
class count_trie {
 public:
  count_trie() { nodes_.push_back({}); }

  // Adds (sign +1) or takes back (-1) every window tokens[i..i+kDepth) of `tokens`.
  void add_all(const std::vector<int32_t>& tokens, size_t from, size_t to, int sign) {
    for (size_t i = from; i < to; ++i) {
      int32_t n = 0;
      nodes_[0].count += sign;
      for (size_t j = i; j < to && j < i + kDepth; ++j) {
        const int32_t c = child(n, tokens[j], sign > 0);
        if (c < 0) break;
        nodes_[static_cast<size_t>(c)].count += sign;
        if (nodes_[static_cast<size_t>(c)].count <= 0) {
          drop(n, c);
          break;  // its subtree held only these windows
        }
        n = c;
      }
    }
  }

  // Grows the trie by one token at the end of a growing sequence: a window opens at it, and
  // every window open (the last kDepth starts, this one included) gets it.
  void append(int32_t token) {
    if (open_.size() == kDepth) open_.pop_front();
    open_.push_back(0);
    ++nodes_[0].count;
    for (auto& n : open_) {
      n = child(n, token, true);
      ++nodes_[static_cast<size_t>(n)].count;
    }
  }

  struct guess {
    std::vector<int32_t> tokens;
    double expected = 0;  // sum of the path probabilities: the tokens expected to be accepted
  };

  // The longest suffix of ctx (min_match..kDepth-max_k tokens) in the trie, and the most frequent
  // path after it. `own`: ctx itself was appended, so its final occurrence of the suffix (which
  // has no continuation yet) is not counted as a failed one.
  guess propose(const std::vector<int32_t>& ctx, int32_t min_match, int32_t max_k, bool own) const {
    guess g;
    const auto size = static_cast<int32_t>(ctx.size());
    // A match leaves the rest of the window for the guess: room for max_k tokens, up to half.
    const int32_t longest = std::min(size, kDepth - std::clamp(max_k, 1, kDepth / 2));
    for (int32_t m = longest; m >= std::max(1, min_match); --m) {
      int32_t n = 0;
      for (int32_t j = size - m; j < size && n >= 0; ++j) n = find(n, ctx[static_cast<size_t>(j)]);
      if (n < 0) continue;
      double total = nodes_[static_cast<size_t>(n)].count - (own ? 1 : 0);
      if (total <= 0 || nodes_[static_cast<size_t>(n)].kids.empty()) continue;  // seen, but nothing followed
      double prob = 1.0;
      const int32_t limit = std::min({max_k, kAlpha * m, kDepth - m});
      while (static_cast<int32_t>(g.tokens.size()) < limit && total > 0) {
        const auto& kids = nodes_[static_cast<size_t>(n)].kids;
        if (kids.empty()) break;
        const auto best = std::max_element(kids.begin(), kids.end(), [&](const auto& a, const auto& b) {
          return nodes_[static_cast<size_t>(a.second)].count < nodes_[static_cast<size_t>(b.second)].count;
        });
        const auto c = nodes_[static_cast<size_t>(best->second)].count;
        prob *= std::min(1.0, c / total);
        if (prob < kMinProb) break;
        g.tokens.push_back(best->first);
        g.expected += prob;
        n = best->second;
        total = c;
      }
      return g;  // the longest match with a continuation decides
    }
    return g;
  }

 private:
  struct node {
    int32_t count = 0;
    std::vector<std::pair<int32_t, int32_t>> kids;  // token, node
  };

  int32_t find(int32_t n, int32_t token) const {
    if (n == 0) {  // the root has a child per distinct token: indexed
      auto it = root_kids_.find(token);
      return it == root_kids_.end() ? -1 : it->second;
    }
    for (const auto& k : nodes_[static_cast<size_t>(n)].kids)
      if (k.first == token) return k.second;
    return -1;
  }

  int32_t child(int32_t n, int32_t token, bool make) {
    if (auto c = find(n, token); c >= 0 || !make) return c;
    int32_t c;
    if (!free_.empty()) {
      c = free_.back();
      free_.pop_back();
    } else {
      c = static_cast<int32_t>(nodes_.size());
      nodes_.push_back({});
    }
    nodes_[static_cast<size_t>(n)].kids.push_back({token, c});
    if (n == 0) root_kids_[token] = c;
    return c;
  }

  // Unlinks c from its parent n and frees c's subtree.
  void drop(int32_t n, int32_t c) {
    auto& kids = nodes_[static_cast<size_t>(n)].kids;
    const auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.second == c; });
    if (n == 0) root_kids_.erase(it->first);
    kids.erase(it);
    std::vector<int32_t> stack{c};
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      for (const auto& k : nodes_[static_cast<size_t>(x)].kids) stack.push_back(k.second);
      nodes_[static_cast<size_t>(x)] = {};
      free_.push_back(x);
    }
  }

  std::vector<node> nodes_;
  std::vector<int32_t> free_;
  std::unordered_map<int32_t, int32_t> root_kids_;  // token -> child of the root
  std::deque<int32_t> open_;  // append(): the nodes where the open windows end
};

class suffix final : public proposer {
 public:
  explicit suffix(const speculative_config& c) : min_match_(c.ngram_min) {}
  std::string name() const override { return "suffix"; }

  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& ctx, int32_t max_k) override {
    if (max_k <= 0) return {};
    auto& own = own_[seq];
    if (own.seen > ctx.size()) own = {};  // not the sequence it was: start again
    for (; own.seen < ctx.size(); ++own.seen) own.trie.append(ctx[own.seen]);
    auto a = own.trie.propose(ctx, min_match_, max_k, true);
    auto b = shared_.propose(ctx, min_match_, max_k, false);
    return std::move(b.expected > a.expected ? b.tokens : a.tokens);
  }

  void on_end(uint64_t seq, const std::vector<int32_t>& ctx, int32_t n_prompt) override {
    own_.erase(seq);
    const auto from = static_cast<size_t>(std::clamp<int32_t>(n_prompt, 0, static_cast<int32_t>(ctx.size())));
    if (from == ctx.size()) return;
    // Only the output is kept (the prompts are each request's own); a long one keeps its end.
    std::vector<int32_t> out(ctx.begin() + static_cast<std::ptrdiff_t>(std::max<size_t>(
                                 from, ctx.size() - std::min<size_t>(ctx.size(), kGlobalTokens))),
                             ctx.end());
    shared_.add_all(out, 0, out.size(), +1);
    kept_tokens_ += static_cast<int64_t>(out.size());
    history_.push_back(std::move(out));
    while (kept_tokens_ > kGlobalTokens) {
      shared_.add_all(history_.front(), 0, history_.front().size(), -1);
      kept_tokens_ -= static_cast<int64_t>(history_.front().size());
      history_.pop_front();
    }
  }

 private:
  struct own_trie {
    count_trie trie;
    size_t seen = 0;  // tokens of the sequence appended so far
  };
  int32_t min_match_;
  std::unordered_map<uint64_t, own_trie> own_;
  count_trie shared_;
  std::deque<std::vector<int32_t>> history_;  // the outputs in shared_, oldest first
  int64_t kept_tokens_ = 0;
};

}  // namespace

void add_suffix(named_registry<proposer_factory>& r) {
  (void)r.add("suffix", [](const speculative_config& c) -> result<std::unique_ptr<proposer>> {
    return std::unique_ptr<proposer>(new suffix(c));
  });
}

}  // namespace troupe::actors::proposers

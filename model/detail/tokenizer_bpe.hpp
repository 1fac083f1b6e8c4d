#pragma once
// Byte-level BPE over one pre-tokenized word: start from its characters and keep merging the
// adjacent pair with the lowest merge rank (leftmost first on ties), as llama.cpp does.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string_view>
#include <vector>

#include "model/detail/tokenizer_data.hpp"
#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::model::detail {

struct bpe_symbol {
  uint32_t start, len;  // bytes of the word; len 0 once merged into its left neighbour
  int32_t id;           // vocabulary id of those bytes, -1 when they are not a token
  int32_t prev, next;
};

struct bpe_bigram {
  int32_t rank;
  int32_t left, right;
  uint32_t right_len;  // a later merge that grew `right` makes this pair stale

  // Priority-queue order: lowest rank on top, then the leftmost pair.
  bool operator<(const bpe_bigram& o) const {
    return rank > o.rank || (rank == o.rank && left > o.left);
  }
};

// Reused across words so a long text does not allocate per word.
struct bpe_scratch {
  std::vector<bpe_symbol> symbols;
  std::priority_queue<bpe_bigram> queue;
};

inline int32_t bpe_rank(const tokenizer_data& d, std::string_view word, const bpe_symbol& l,
                        const bpe_symbol& r) {
  if (l.id >= 0 && r.id >= 0) {
    auto it = d.ranks.by_ids.find(bpe_ranks::id_key(l.id, r.id));
    return it == d.ranks.by_ids.end() ? -1 : it->second;
  }
  if (d.ranks.by_text.empty()) return -1;
  auto it = d.ranks.by_text.find(
      bpe_ranks::text_key(word.substr(l.start, l.len), word.substr(r.start, r.len)));
  return it == d.ranks.by_text.end() ? -1 : it->second;
}

inline void bpe_push_pair(const tokenizer_data& d, std::string_view word, bpe_scratch& s,
                          int32_t left, int32_t right) {
  if (left < 0 || right < 0) return;
  const auto& l = s.symbols[left];
  const auto& r = s.symbols[right];
  const int32_t rank = bpe_rank(d, word, l, r);
  if (rank >= 0) s.queue.push({rank, left, right, r.len});
}

// `word` is already in the byte-level alphabet. Appends its token ids to `out`.
inline void bpe_encode_word(const tokenizer_data& d, std::string_view word, bpe_scratch& s,
                            std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (d.ignore_merges) {
    const int32_t whole = d.find(word);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  s.symbols.clear();
  s.queue = {};
  for (uint32_t off = 0; off < word.size();) {
    const auto n = static_cast<uint32_t>(std::min<size_t>(
        utf8_lead_len(static_cast<unsigned char>(word[off])), word.size() - off));
    const auto idx = static_cast<int32_t>(s.symbols.size());
    s.symbols.push_back({off, n, d.find(word.substr(off, n)), idx - 1,
                         off + n == word.size() ? -1 : idx + 1});
    off += n;
  }
  for (int32_t i = 1; i < static_cast<int32_t>(s.symbols.size()); ++i)
    bpe_push_pair(d, word, s, i - 1, i);

  while (!s.queue.empty()) {
    const bpe_bigram b = s.queue.top();
    s.queue.pop();
    auto& l = s.symbols[b.left];
    auto& r = s.symbols[b.right];
    if (l.len == 0 || r.len == 0 || r.len != b.right_len) continue;
    l.len += r.len;
    r.len = 0;
    l.id = d.find(word.substr(l.start, l.len));
    l.next = r.next;
    if (r.next >= 0) s.symbols[r.next].prev = b.left;
    bpe_push_pair(d, word, s, l.prev, b.left);
    bpe_push_pair(d, word, s, b.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) {
    const auto& sym = s.symbols[i];
    if (sym.len == 0) continue;
    if (sym.id >= 0) {
      out.push_back(sym.id);
      continue;
    }
    // A merge result missing from the vocabulary: fall back to single bytes that are tokens,
    // dropping the rest, as llama.cpp does.
    for (uint32_t k = 0; k < sym.len; ++k) {
      const int32_t id = d.find(word.substr(sym.start + k, 1));
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace troupe::model::detail

#pragma once
// SentencePiece BPE: start from the characters of the (▁-escaped) text and keep merging the
// adjacent pair whose concatenation is the highest-scoring token (leftmost first on ties); what
// never became a token is spelled with <0xNN> byte tokens. Mirrors llama.cpp's SPM session.
#include <algorithm>
#include <cstdint>
#include <queue>
#include <string_view>
#include <vector>

#include "model/detail/tokenizer_data.hpp"
#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::model::detail {

struct spm_symbol {
  uint32_t start, len;  // len 0 once merged into its left neighbour
  int32_t prev, next;
};

struct spm_bigram {
  float score;
  int32_t left, right;
  uint32_t size;  // bytes of the pair when queued; a mismatch later means it is stale

  // Priority-queue order: highest score on top, then the leftmost pair.
  bool operator<(const spm_bigram& o) const {
    return score < o.score || (score == o.score && left > o.left);
  }
};

inline void spm_encode(const tokenizer_data& d, std::string_view text, std::vector<int32_t>& out) {
  std::vector<spm_symbol> sym;
  std::priority_queue<spm_bigram> queue;
  for (uint32_t off = 0; off < text.size();) {
    const auto n = static_cast<uint32_t>(std::min<size_t>(
        utf8_lead_len(static_cast<unsigned char>(text[off])), text.size() - off));
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({off, n, idx - 1, off + n == text.size() ? -1 : idx + 1});
    off += n;
  }
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = sym[left].len + sym[right].len;
    const int32_t id = d.find(text.substr(sym[left].start, size));
    if (id < 0) return;
    queue.push({d.score[id], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_pair(i - 1, i);

  while (!queue.empty()) {
    const spm_bigram b = queue.top();
    queue.pop();
    auto& l = sym[b.left];
    auto& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }

  // Every merge produced a token, so only unmerged characters can be missing from the
  // vocabulary (llama.cpp's reverse-merge lookup never finds anything else).
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const auto& s = sym[i];
    const auto piece = text.substr(s.start, s.len);
    const int32_t id = d.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char c : piece) {
      if (d.byte_token[c] >= 0) out.push_back(d.byte_token[c]);
    }
  }
}

}  // namespace troupe::model::detail

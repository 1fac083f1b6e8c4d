#pragma once
// compiled_constraint's insides, shared by compile() and the matcher (structured/constraint.cpp):
// the grammar lowered to byte level, its shortest lengths, and the mask caches that every sequence
// using it shares. The lowering is in compiled_constraint.cpp.
//
// The GBNF IR (code-point classes) is lowered to byte level: a class becomes the alternatives of
// its UTF-8 byte sequences (one byte set per position), so a token may end in the middle of a
// multi-byte character and the matcher needs no partial-code-point state: the stacks sitting on a
// continuation byte are that state.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/constraint.hpp"
#include "structured/gbnf.hpp"

namespace troupe::structured {

namespace detail {

enum class sym_kind : uint8_t { bytes, ref, end };
struct sym {
  sym_kind kind;
  uint32_t arg;  // bytes: index into sets; ref: rule
};
using byte_set = std::array<uint64_t, 4>;
inline bool has_byte(const byte_set& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }

}  // namespace detail

class compiled_constraint {
 public:
  std::shared_ptr<const token_vocabulary> vocab;
  std::vector<detail::sym> syms;
  std::vector<detail::byte_set> sets;
  std::vector<std::vector<uint32_t>> alts;  // rule -> start positions of its alternatives
  uint32_t root = 0;
  // The fewest bytes from each position to the end of its alternative (calls at their rules'
  // shortest), and each rule's shortest sentence: how far a state is from a complete output.
  std::vector<int64_t> min_from;
  std::vector<int64_t> min_rule;
  int64_t max_rule_min = 0;  // the largest finite min_rule: the most one byte can add to the way out

  // Two bounded caches (the oldest entries go first), shared by every sequence and thread:
  // a state's whole key -> its mask, and a cut state's key -> the part of its walk that holds
  // whatever lies beneath the cut.
  struct cut_walk {
    bool too_shallow = false;       // the cut decided too much of the vocabulary: cut deeper
    std::vector<uint64_t> mask;     // tokens allowed whatever lies beneath the cut
    std::vector<uint32_t> pending;  // trie nodes (preorder, ascending) whose subtrees, themselves
                                    // included, the frames beneath the cut decide
  };
  template <typename V>
  struct bounded_cache {
    std::unordered_map<std::string, std::shared_ptr<const V>> items;
    std::deque<std::string> order;
    std::atomic<int64_t> hits{0}, misses{0};
    std::shared_ptr<const V> find(const std::string& key) {
      auto it = items.find(key);
      if (it == items.end()) return nullptr;
      ++hits;  // counted under a shared lock: a relaxed figure for benchmarks, not for logic
      return it->second;
    }
    void put(const std::string& key, std::shared_ptr<const V> v, size_t max_items) {
      ++misses;
      if (!items.emplace(key, std::move(v)).second) return;
      order.push_back(key);
      while (items.size() > max_items) {
        items.erase(order.front());
        order.pop_front();
      }
    }
  };
  mutable std::shared_mutex mu;
  mutable bounded_cache<std::vector<uint64_t>> masks;
  mutable bounded_cache<cut_walk> cuts;
  size_t max_masks = 1024;

  uint32_t add_set(const detail::byte_set& s);
  void lower(const gbnf_grammar& g);
  // Fixed point of the shortest lengths (the grammar has no rule that cannot finish: gbnf refuses
  // those, so every length is finite).
  void shortest();
};

}  // namespace troupe::structured

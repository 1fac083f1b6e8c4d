#pragma once
// The "exact" response cache, without CAF: an exact-match cache in memory. The key is the
// model, the full rendered prompt (its token ids) and everything that shapes the answer
// (sampling parameters, max_tokens, stop strings, end-of-generation tokens): cache/cache_key.hpp's
// exact_key. The value is the completion's tokens and finish reason, replayed through the
// streamer on a hit. Only reproducible answers are cached: greedy ones, or sampled ones with an
// explicit seed (the sampler is seed-deterministic), and none that ask for top logprobs or refuse
// the cache (`cache: false`: neither looked up nor stored). LRU
// beyond max_entries. The semantic cache (cache/semantic/) is the default policy; this one is
// policy "exact".
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/answer.hpp"
#include "cache/cache_key.hpp"

namespace troupe::cache {

struct exact_cache_config {
  bool enabled = true;
  size_t max_entries = 4096;   // answers kept; least recently used go first
};

struct exact_cache_stats {
  int64_t lookups = 0;
  int64_t hits = 0;
  int64_t stores = 0;
  int64_t entries = 0;
};

class exact_cache {
 public:
  explicit exact_cache(exact_cache_config cfg) : cfg_(cfg) {}

  static bool cacheable(const cache_query& q);

  // A hit (counted and moved to the front), or null. A miss of a cacheable request is
  // remembered by id so that its answer can be stored when its stream closes.
  const cached_answer* lookup(const cache_query& q);
  // A stream ended: store its answer if it was a remembered miss that finished normally.
  void on_closed(const finished_answer& a);

  exact_cache_stats stats() const;

 private:
  void put(const std::string& key, cached_answer a);

  exact_cache_config cfg_;
  std::list<std::pair<std::string, cached_answer>> lru_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, cached_answer>>::iterator> index_;
  std::unordered_map<uint64_t, std::string> pending_;     // misses in flight: id -> key
  std::list<uint64_t> pending_order_;                     // bounds pending_ if closes get lost
  exact_cache_stats st_;
};

}  // namespace troupe::cache

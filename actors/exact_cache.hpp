#pragma once
// The response cache's decisions, without CAF: an exact-match cache in memory. The key is the
// model, the full rendered prompt (its token ids) and everything that shapes the answer
// (sampling parameters, max_tokens, stop strings, end-of-generation tokens); the value is the
// completion's tokens and finish reason, replayed through the streamer on a hit. Only
// reproducible answers are cached: greedy ones, or sampled ones with an explicit seed (the
// sampler is seed-deterministic), and none that ask for top logprobs. LRU beyond max_entries.
// The semantic cache replaces this class behind the cache actor's interface.
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actors/request.hpp"
#include "actors/streamer_state.hpp"

namespace troupe::actors {

struct cache_config {
  bool enabled = true;
  size_t max_entries = 4096;   // answers kept; least recently used go first
};

struct cache_entry {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;
};

struct cache_stats {
  int64_t lookups = 0;
  int64_t hits = 0;
  int64_t stores = 0;
  int64_t entries = 0;
  int64_t semantic_hits = 0;  // of the hits, those found by meaning rather than the exact text
  bool enabled = true;
  std::string policy;         // the response cache policy's name
  std::string status;         // why the cache is disabled or degraded; empty when healthy
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_stats& x) {
  return f(caf::meta::type_name("cache_stats"), x.lookups, x.hits, x.stores, x.entries, x.semantic_hits,
           x.enabled, x.policy, x.status);
}

class exact_cache {
 public:
  explicit exact_cache(cache_config cfg) : cfg_(cfg) {}

  static bool cacheable(const admitted_request& r);
  static std::string key_of(const admitted_request& r);

  // A hit (counted and moved to the front), or null. A miss of a cacheable request is
  // remembered by id so that its answer can be stored when its stream closes.
  const cache_entry* lookup(const admitted_request& r);
  // A stream ended: store its answer if it was a remembered miss that finished normally.
  void on_closed(const closed_stream& c);

  cache_stats stats() const;

 private:
  void put(const std::string& key, cache_entry e);

  cache_config cfg_;
  std::list<std::pair<std::string, cache_entry>> lru_;  // most recent first
  std::unordered_map<std::string, std::list<std::pair<std::string, cache_entry>>::iterator> index_;
  std::unordered_map<uint64_t, std::string> pending_;   // misses in flight: id -> key
  std::list<uint64_t> pending_order_;                   // bounds pending_ if closes get lost
  cache_stats st_;
};

}  // namespace troupe::actors

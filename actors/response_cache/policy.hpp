#pragma once
// What the cache actor wraps: a response cache policy, chosen by name from a registry. A lookup
// either returns an answer to replay through the streamer (no KV, no model step) or nothing; a
// stream that closes is offered back so that finished answers can be stored. Built in:
//   "semantic"  cache/semantic/semantic_cache: exact path, then embeddings + ANN (RocksDB, survives restarts)
//   "exact"     cache/exact/exact_cache: in memory, same rendered prompt token for token
// The built-ins hand cache/ plain values (query_of, answer_of): cache/ knows no actor.
// A policy never fails a request: its faults become misses and show in stats().status.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/request.hpp"
#include "actors/response_cache/response_cache.hpp"
#include "actors/streamer/streamer.hpp"
#include "cache/answer.hpp"
#include "cache/cache_key.hpp"
#include "common/named_registry.hpp"

namespace troupe::actors {

struct cache_answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;
  float similarity = 1.0f;  // cosine between the questions; 1 for an exact match
};

class response_cache {
 public:
  virtual ~response_cache() = default;
  virtual std::string name() const = 0;
  virtual std::optional<cache_answer> lookup(const admitted_request& r) = 0;
  virtual void on_closed(const closed_stream& c) = 0;
  virtual response_cache_stats stats() const = 0;
};

// Makes a policy; `detokenize` turns token ids into text (stored with answers where useful).
using response_cache_factory = std::function<result<std::unique_ptr<response_cache>>(
    const response_cache_config&, std::function<std::string(const std::vector<int32_t>&)> detokenize)>;

// The process-wide registry, holding "semantic" and "exact" from its first use.
named_registry<response_cache_factory>& response_cache_registry();

// What cache/ looks up for an admitted request: its parameters, and the texts its prompt was
// rendered from split into context and question (none for a prompt_tokens request), its tenant
// (part of the key unless `share_across_tenants`) and its output constraint.
cache::cache_query query_of(const admitted_request& r, bool share_across_tenants = false);
// What cache/ is offered of a closed stream.
cache::finished_answer answer_of(const closed_stream& c);

}  // namespace troupe::actors

#pragma once
// The answers the response cache keeps and is offered, as plain values (cache/cache_key.hpp has
// the query). The response-cache stage makes a finished_answer of each stream that closes.
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::cache {

// An answer to replay: the completion's tokens and how it ended.
struct cached_answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;
};

// A stream that closed. Only a complete answer is stored.
struct finished_answer {
  uint64_t id = 0;                  // the request's id (cache_query::id)
  std::string finish_reason;        // empty when the request failed
  std::vector<int32_t> tokens;      // the completion's tokens
  std::vector<float> logprobs;
  bool cached = false;              // it was itself a cache replay
  bool filtered = false;            // an output filter ended it: the tokens are no answer to store

  // It ended by itself: an end-of-generation token or a stop string ("stop"), or max_tokens
  // ("length"). A cancelled, failed, replayed or filtered stream holds no answer to store.
  bool complete() const { return !cached && !filtered && (finish_reason == "stop" || finish_reason == "length"); }
};

}  // namespace troupe::cache

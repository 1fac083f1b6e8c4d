#pragma once
// A request's say in the response cache: the wire protocol's `cache` field (absent, true or
// false), carried from the client through admission to the cache's query (cache_key.hpp).
#include <cstdint>

namespace troupe::cache {

enum class cache_choice : uint8_t {
  automatic,  // the field is absent: the cache's own rule decides (deterministic answers only)
  requested,  // `cache: true`: a sampled answer may be served from and stored in the cache too
  refused,    // `cache: false`: never looked up, never stored; the client wants a fresh answer
};

}  // namespace troupe::cache

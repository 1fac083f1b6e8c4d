#pragma once
// The load order that least_loaded picks by and prefix_affinity falls back to: the fewest tokens
// the router has placed and not seen finish (current, unlike a report), then the fewest sequences
// the replica reported waiting or running, then the most free KV blocks; ties by replica id so a
// choice is reproducible.
#include <cstddef>
#include <tuple>
#include <vector>

#include "actors/router/policy.hpp"

namespace troupe::actors::detail {

inline bool less_loaded(const replica_view& a, const replica_view& b) {
  const auto key = [](const replica_view& v) {
    return std::make_tuple(v.queued_tokens, static_cast<int64_t>(v.waiting) + v.running, -v.kv_blocks_available, v.id);
  };
  return key(a) < key(b);
}

// The index of the least loaded replica (`replicas` is never empty).
inline size_t least_loaded_index(const std::vector<replica_view>& replicas) {
  size_t best = 0;
  for (size_t i = 1; i < replicas.size(); ++i)
    if (less_loaded(replicas[i], replicas[best])) best = i;
  return best;
}

}  // namespace troupe::actors::detail

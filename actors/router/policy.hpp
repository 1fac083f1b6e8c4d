#pragma once
// A routing policy picks which engine replica serves a request. It looks only at plain values:
// the request's prompt tokens and each live replica's last load report and prefix summary; it
// never touches the router's tables. Policies register by name in routing_policy_registry()
// (an unknown name lists the known ones) and `router.policy` names one. Built-ins, in
// policies/: round_robin, least_loaded, prefix_affinity; plugins add others
// (troupe_plugin_host::add_routing_policy, docs/extending.md).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/named_registry.hpp"
#include "common/result.hpp"

namespace troupe::actors {

// A live replica as a policy sees it.
struct replica_view {
  uint64_t id = 0;                 // the router's id for the replica (0: the front's own)
  int32_t waiting = 0;             // sequences queued at its scheduler
  int32_t running = 0;             // sequences holding KV there
  int64_t queued_tokens = 0;       // prompt + remaining tokens of what the router placed there and
                                   // has not seen finish (the router's own count, always current)
  int32_t kv_blocks_available = 0; // from its last load report
  int32_t kv_blocks_total = 0;
  int32_t max_num_seqs = 0;
  // How many leading tokens of this request's prompt the replica likely holds in its prefix
  // cache (whole blocks; the router's estimate from what it sent there).
  int32_t prefix_hit_tokens = 0;
};

// What a policy may know of the request.
struct route_request {
  uint64_t id = 0;
  int32_t prompt_tokens = 0;
  int32_t max_tokens = 0;
  std::string tenant;
};

class routing_policy {
 public:
  virtual ~routing_policy() = default;
  virtual std::string name() const = 0;
  // The replica to use, by index into `replicas` (never empty), or nullopt to use none.
  virtual std::optional<size_t> pick(const route_request& r, const std::vector<replica_view>& replicas) = 0;
  // Whether pick() reads replica_view::prefix_hit_tokens (the router computes it only then).
  virtual bool wants_prefix_hits() const { return false; }
};

// The knobs of a routing policy, numbers by name (e.g. "max_imbalance" for prefix_affinity). A
// policy documents the keys it reads where it is defined; keys it does not know make its factory
// fail, naming them.
struct routing_options {
  std::map<std::string, double> values;
  double get(const std::string& key, double fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
};

using routing_policy_factory = std::function<result<std::unique_ptr<routing_policy>>(const routing_options&)>;

// The process-wide registry, holding the built-ins from its first use.
named_registry<routing_policy_factory>& routing_policy_registry();

// Checks `options` only holds keys from `known`; the error names the first stranger and the
// policy's keys (what a factory returns for an option it does not know).
status check_routing_keys(const std::string& policy, const routing_options& options,
                          const std::vector<std::string>& known);

// Defined in policies/*.cpp; called by routing_policy_registry().
void add_round_robin(named_registry<routing_policy_factory>& r);
void add_least_loaded(named_registry<routing_policy_factory>& r);
void add_prefix_affinity(named_registry<routing_policy_factory>& r);

}  // namespace troupe::actors

#include "actors/router/policy.hpp"

#include "common/options.hpp"

namespace troupe::actors {

named_registry<routing_policy_factory>& routing_policy_registry() {
  static auto* r =
      new named_registry<routing_policy_factory>("routing policy", {add_round_robin, add_least_loaded, add_prefix_affinity});
  return *r;
}

status check_routing_keys(const std::string& policy, const routing_options& options,
                          const std::vector<std::string>& known) {
  return check_known_keys("routing policy '" + policy + "'", options.values, known);
}

}  // namespace troupe::actors

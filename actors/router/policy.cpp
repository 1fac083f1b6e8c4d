#include "actors/router/policy.hpp"

namespace troupe::actors {

named_registry<routing_policy_factory>& routing_policy_registry() {
  static auto* r =
      new named_registry<routing_policy_factory>("routing policy", {add_round_robin, add_least_loaded, add_prefix_affinity});
  return *r;
}

status check_routing_keys(const std::string& policy, const routing_options& options,
                          const std::vector<std::string>& known) {
  for (const auto& [k, v] : options.values) {
    bool found = false;
    for (const auto& n : known) found = found || n == k;
    if (!found) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      return make_error("routing policy '" + policy + "' has no option '" + k + "' (it has: " +
                        (list.empty() ? std::string("none") : list) + ")");
    }
  }
  return {};
}

}  // namespace troupe::actors

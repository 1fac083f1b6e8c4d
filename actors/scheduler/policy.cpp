#include "actors/scheduler/policy.hpp"

#include "common/options.hpp"

namespace troupe::actors {

named_registry<policy_factory>& scheduling_policy_registry() {
  static auto* r = new named_registry<policy_factory>(
      "scheduling policy", {policies::add_fcfs, policies::add_priority, policies::add_sjf, policies::add_static,
                            policies::add_adaptive, policies::add_window, policies::add_bucketed});
  return *r;
}

status check_policy_keys(const std::string& policy, const policy_options& options,
                         const std::vector<std::string>& known) {
  return check_known_keys("policy '" + policy + "'", options.values, known);
}

}  // namespace troupe::actors

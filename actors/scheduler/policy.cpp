#include "actors/scheduler/policy.hpp"

namespace troupe::actors {

named_registry<policy_factory>& scheduling_policy_registry() {
  static auto* r = new named_registry<policy_factory>(
      "scheduling policy", {policies::add_fcfs, policies::add_priority, policies::add_sjf, policies::add_static,
                            policies::add_adaptive, policies::add_window, policies::add_bucketed});
  return *r;
}

status check_policy_keys(const std::string& policy, const policy_options& options,
                         const std::vector<std::string>& known) {
  for (const auto& [k, v] : options.values) {
    bool found = false;
    for (const auto& n : known) found = found || n == k;
    if (!found) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      return make_error("policy '" + policy + "' has no option '" + k + "' (it has: " +
                        (list.empty() ? std::string("none") : list) + ")");
    }
  }
  return {};
}

}  // namespace troupe::actors

#include "actors/scheduling_policy.hpp"

#include <stdexcept>

namespace troupe::actors {

policy_registry& policy_registry::global() {
  static policy_registry* r = [] {
    auto* reg = new policy_registry;  // never destroyed: static registrars may run after exit starts
    policies::add_fcfs(*reg);
    policies::add_priority(*reg);
    policies::add_sjf(*reg);
    policies::add_static(*reg);
    policies::add_adaptive(*reg);
    policies::add_window(*reg);
    policies::add_bucketed(*reg);
    return reg;
  }();
  return *r;
}

status policy_registry::add(const std::string& name, policy_factory f) {
  if (name.empty()) return make_error("a scheduling policy needs a name");
  std::lock_guard<std::mutex> lock(mu_);
  if (!factories_.emplace(name, std::move(f)).second)
    return make_error("scheduling policy '" + name + "' is registered twice");
  return {};
}

result<std::unique_ptr<scheduling_policy>> policy_registry::make(const std::string& name,
                                                                 const policy_options& o) const {
  policy_factory f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      std::string known;
      for (const auto& [k, v] : factories_) known += (known.empty() ? "" : ", ") + k;
      return make_error("unknown scheduling policy '" + name + "' (known: " + known + ")");
    }
    f = it->second;
  }
  return f(o);
}

std::vector<std::string> policy_registry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : factories_) out.push_back(k);
  return out;
}

bool policy_registry::contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return factories_.count(name) != 0;
}

register_policy::register_policy(const std::string& name, policy_factory f) {
  if (auto s = policy_registry::global().add(name, std::move(f)); !s) throw std::logic_error(s.error());
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

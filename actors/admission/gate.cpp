#include "actors/admission/gate.hpp"

#include <algorithm>

namespace troupe::actors {

named_registry<admission_actor_factory>& admission_actor_registry() {
  static auto* r = new named_registry<admission_actor_factory>("admission actor");  // never destroyed: plugins hold on
  return *r;
}

bool is_admission_actor(const std::string& name) { return admission_actor_registry().contains(name); }

std::vector<std::string> admission_policy_names() {
  auto names = admission_policy_registry().names();
  for (auto& n : admission_actor_registry().names()) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

status validate_admission_policy(const admission_config& cfg) {
  if (auto f = admission_actor_registry().find(cfg.policy)) {
    auto made = f.value()(cfg);
    if (!made) return make_error(made.error());
    if (!made.value()) return make_error("admission actor '" + cfg.policy + "' made nothing");
    return {};
  }
  if (admission_policy_registry().contains(cfg.policy)) {
    if (auto p = make_admission_policy(cfg); !p) return make_error(p.error());
    return {};
  }
  std::string known;
  for (const auto& n : admission_policy_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error("unknown admission policy '" + cfg.policy + "' (known policies and actors: " +
                    (known.empty() ? std::string("none") : known) + ")");
}

}  // namespace troupe::actors

#include "config/config_registries.hpp"

#include "actors/response_cache.hpp"
#include "actors/scheduling_policy.hpp"
#include "cache/embedder.hpp"
#include "model/backend.hpp"

namespace troupe::config {

config_registries config_registries::global() {
  config_registries r;
  r.scheduler_policies = [] { return actors::policy_registry::global().names(); };
  // Admission has no registry yet; its one built-in behaviour goes by this name.
  r.admission_policies = [] { return std::vector<std::string>{"token_bucket"}; };
  r.cache_policies = [] { return actors::response_cache_registry().names(); };
  r.embedders = [] { return cache::embedder_registry::global().names(); };
  // The streamer has no filters yet: any name is unknown until a filter registry exists.
  r.filters = [] { return std::vector<std::string>{}; };
  r.backends = [] { return model::backend_names(); };
  r.scheduler_policy_options = [](const std::string& policy, const std::map<std::string, double>& options) -> status {
    if (!actors::policy_registry::global().contains(policy)) return {};  // reported as an unknown name
    actors::policy_options o;
    o.values = options;
    auto made = actors::policy_registry::global().make(policy, o);
    if (!made) return make_error(made.error());
    return {};
  };
  return r;
}

}  // namespace troupe::config

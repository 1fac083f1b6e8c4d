#include "config/config_registries.hpp"

#include "actors/admission/gate.hpp"
#include "actors/admission/policy.hpp"
#include "actors/streamer/filters/filter_actor.hpp"
#include "actors/response_cache/policy.hpp"
#include "actors/router/policy.hpp"
#include "actors/scheduler/policy.hpp"
#include "actors/scheduler/speculative/proposer.hpp"
#include "actors/streamer/filters/stream_filter.hpp"
#include "cache/embed/embedder.hpp"
#include "model/backend.hpp"

namespace troupe::config {

config_registries config_registries::global() {
  config_registries r;
  r.scheduler_policies = [] { return actors::scheduling_policy_registry().names(); };
  r.router_policies = [] { return actors::routing_policy_registry().names(); };
  r.admission_policies = [] { return actors::admission_policy_names(); };
  r.cache_policies = [] { return actors::response_cache_registry().names(); };
  r.embedders = [] { return cache::embedder_registry().names(); };
  r.filters = [] { return actors::output_filter_names(); };
  r.backends = [] { return model::backend_names(); };
  r.speculative_methods = [] {
    auto v = actors::proposer_registry().names();
    v.insert(v.begin(), "off");
    return v;
  };
  r.scheduler_policy_options = [](const std::string& policy, const std::map<std::string, double>& options) -> status {
    if (!actors::scheduling_policy_registry().contains(policy)) return {};  // reported as an unknown name
    actors::policy_options o;
    o.values = options;
    auto made = actors::scheduling_policy_registry().make(policy, o);
    if (!made) return make_error(made.error());
    return {};
  };
  r.router_policy_options = [](const std::string& policy, const std::map<std::string, double>& options) -> status {
    if (!actors::routing_policy_registry().contains(policy)) return {};  // reported as an unknown name
    actors::routing_options o;
    o.values = options;
    auto made = actors::routing_policy_registry().make(policy, o);
    if (!made) return make_error(made.error());
    return {};
  };
  r.admission_policy_options = [](const std::string& policy, const std::map<std::string, option_value>& options) -> status {
    if (!actors::admission_policy_registry().contains(policy) && !actors::is_admission_actor(policy))
      return {};  // reported as an unknown name
    actors::admission_config a;
    a.policy = policy;
    a.policy_options = options;
    return actors::validate_admission_policy(a);
  };
  r.filter_options = [](const std::string& filter, const std::map<std::string, option_value>& options) -> status {
    if (auto actor = actors::filter_actor_registry().find(filter)) {
      auto made = actor.value()(options);
      if (!made) return make_error(made.error());
      return {};
    }
    auto factory = actors::stream_filter_registry().find(filter);
    if (!factory) return {};  // reported as an unknown name
    auto made = factory.value()(options);
    if (!made) return make_error(made.error());
    return {};
  };
  return r;
}

}  // namespace troupe::config

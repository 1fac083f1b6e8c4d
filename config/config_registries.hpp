#pragma once
// The names a config may use, by kind, for validation at load: a scheduling or routing policy,
// a response cache policy, an embedder, an output filter, a backend are each chosen by a name
// that must be registered. Each hook lists the registered names; an unset hook accepts any name (for a first
// read of a file whose plugins must load before their names exist: read with unchecked(), load
// the plugins, read again with global()).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/options.hpp"
#include "common/result.hpp"

namespace troupe::config {

struct config_registries {
  using names_fn = std::function<std::vector<std::string>()>;

  names_fn scheduler_policies;   // scheduler.policy
  names_fn router_policies;      // router.policy
  names_fn admission_policies;   // admission.policy
  names_fn cache_policies;       // cache.policy
  names_fn embedders;            // cache.embedder
  names_fn filters;              // streamer.filters[].name
  names_fn backends;             // model.backend
  names_fn speculative_methods;  // speculative.method ("off" or a proposer)
  // A policy's own check of its options (an unknown option is an error); unset: none.
  std::function<status(const std::string& policy, const std::map<std::string, double>& options)>
      scheduler_policy_options;
  std::function<status(const std::string& policy, const std::map<std::string, double>& options)> router_policy_options;
  // The same for the admission policy and for each output filter (their factories run once).
  std::function<status(const std::string& policy, const std::map<std::string, option_value>& options)>
      admission_policy_options;
  std::function<status(const std::string& filter, const std::map<std::string, option_value>& options)> filter_options;

  // The registries of this process: built-ins plus whatever plugins registered so far.
  static config_registries global();
  // Every hook unset: names are not checked.
  static config_registries unchecked() { return {}; }
};

}  // namespace troupe::config

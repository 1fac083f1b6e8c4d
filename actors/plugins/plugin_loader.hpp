#pragma once
// Loads plugins (shared libraries, see plugin_api.hpp) and runs their entry points against
// troupe's registries. Each step that can fail says which library and why: dlopen's own message
// for a missing file or an unresolved symbol, a missing entry point, an ABI mismatch ("plugin X
// was built for ABI 2, this troupe has ABI 1"), an entry point that failed or threw, a name
// already taken (naming who took it). Libraries are never unloaded. Loading the same library
// again through the same loader is a no-op.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/admission/gate.hpp"
#include "actors/admission/policy.hpp"
#include "actors/streamer/filters/filter_actor.hpp"
#include "common/named_registry.hpp"
#include "actors/response_cache/policy.hpp"
#include "actors/router/policy.hpp"
#include "actors/scheduler/policy.hpp"
#include "actors/streamer/filters/stream_filter.hpp"
#include "common/result.hpp"

namespace troupe::actors {

// Where plugins register: the process-wide registries, or others (tests).
struct plugin_registries {
  named_registry<policy_factory>* scheduling_policies = nullptr;
  named_registry<admission_policy_factory>* admission_policies = nullptr;
  named_registry<stream_filter_factory>* stream_filters = nullptr;
  named_registry<response_cache_factory>* response_caches = nullptr;
  named_registry<routing_policy_factory>* routing_policies = nullptr;
  named_registry<admission_actor_factory>* admission_actors = nullptr;
  named_registry<filter_actor_factory>* filter_actors = nullptr;
  static plugin_registries global();
};

struct loaded_plugin {
  std::string path;                     // as loaded (absolute)
  std::vector<std::string> registered;  // "stream filter 'redact_words'", ...
};

class plugin_loader {
 public:
  explicit plugin_loader(plugin_registries r = plugin_registries::global());
  plugin_loader(const plugin_loader&) = delete;
  plugin_loader& operator=(const plugin_loader&) = delete;

  // Loads the library at `path` (relative: to the working directory) and registers its parts.
  result<loaded_plugin> load(const std::string& path);

  // The loader of `troupe serve`, over the process-wide registries.
  static plugin_loader& global();

 private:
  friend class plugin_host_impl;
  plugin_registries reg_;
  std::mutex mu_;                                  // one load at a time
  std::map<void*, loaded_plugin> loaded_;          // dlopen handle -> what it registered
  std::map<std::string, std::string> origin_;      // "kind 'name'" -> the plugin that registered it
};

// Loads `paths` in order with plugin_loader::global(); stops at the first error, which names the
// path. Answers what each registered.
result<std::vector<loaded_plugin>> load_plugins(const std::vector<std::string>& paths);

}  // namespace troupe::actors

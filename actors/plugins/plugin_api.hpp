#pragma once
// The one header a troupe plugin includes. A plugin is a shared library named in the config
// (`plugins = ["path/libfoo.so"]`); `troupe serve` loads it at startup, before the config's names
// are checked, and calls its entry point, which registers the plugin's parts by name. The config
// then chooses them by those names like the built-in ones. docs/extending.md walks through it.
//
// A plugin defines two C symbols:
//
//   TROUPE_PLUGIN_ABI()                                  // troupe_plugin_abi_version()
//   extern "C" int troupe_plugin_register(troupe_plugin_host* host) {
//     host->add_stream_filter("shout", make_shout);      // errors are the host's to report
//     return 0;                                          // non-zero: failed (say why with host->fail)
//   }
//
// The ABI version is checked before anything else: a plugin built against other troupe headers
// is refused with both versions named. Build plugins with the same compiler and standard library
// as troupe (the interfaces below pass std::string, std::function and std::unique_ptr), link
// them against nothing of troupe (the registries live in the troupe executable, which exports
// its symbols), and never unload them: troupe keeps each library loaded for the life of the
// process, since the factories it registered point into it.
#include <string>

#include "actors/admission/gate.hpp"
#include "actors/admission/policy.hpp"
#include "actors/streamer/filters/filter_actor.hpp"
#include "actors/response_cache/policy.hpp"
#include "actors/router/policy.hpp"
#include "actors/scheduler/policy.hpp"
#include "actors/streamer/filters/stream_filter.hpp"
#include "common/result.hpp"

// Raised whenever something a plugin compiles against changes incompatibly: this header, the
// interfaces and structs it includes (scheduling_policy, admission_policy, stream_filter,
// response_cache, routing_policy with route_request and replica_view, options), the actor
// protocols (admission_gate, filter_actor), or the registries' factory types. 2: admission
// actors and filter actors. 3: request_spec grew constraint and tools. 4: routing policies
// (add_routing_policy, a new slot in the host's vtable); request_spec and chat_message grew
// parallel_tool_calls and participant names.
#define TROUPE_PLUGIN_ABI_VERSION 4

// What troupe hands the entry point. Every call registers into the process-wide registry of its
// kind; an empty or taken name is an error naming both registrants (the first error also fails
// the plugin, whatever the entry point returns). Only valid during troupe_plugin_register.
class troupe_plugin_host {
 public:
  virtual int abi_version() const = 0;
  // The library's path, as loaded.
  virtual const char* plugin_path() const = 0;

  virtual troupe::status add_scheduling_policy(const std::string& name, troupe::actors::policy_factory f) = 0;
  virtual troupe::status add_admission_policy(const std::string& name, troupe::actors::admission_policy_factory f) = 0;
  virtual troupe::status add_stream_filter(const std::string& name, troupe::actors::stream_filter_factory f) = 0;
  virtual troupe::status add_response_cache(const std::string& name, troupe::actors::response_cache_factory f) = 0;
  // The router's choice of replica (`router.policy`, `[router.policy_options]`); its names are
  // one namespace with the built-in routing policies (round_robin, least_loaded, ...).
  virtual troupe::status add_routing_policy(const std::string& name, troupe::actors::routing_policy_factory f) = 0;
  // Actors: started by troupe from the factory's spawner with CAF's actor system (link the plugin
  // against CAF, the same libcaf_core troupe uses). An admission actor shares its names with
  // the admission policies, a filter actor with the stream filters.
  virtual troupe::status add_admission_actor(const std::string& name, troupe::actors::admission_actor_factory f) = 0;
  virtual troupe::status add_filter_actor(const std::string& name, troupe::actors::filter_actor_factory f) = 0;

  // A line in troupe's log (info level), prefixed with the plugin's path.
  virtual void log(const std::string& message) = 0;
  // Why the entry point failed, when it returns non-zero.
  virtual void fail(const std::string& message) = 0;

 protected:
  ~troupe_plugin_host() = default;
};

// The two symbols troupe looks up with dlsym.
extern "C" {
using troupe_plugin_abi_version_fn = int (*)();
using troupe_plugin_register_fn = int (*)(troupe_plugin_host*);
}

// Defines troupe_plugin_abi_version() as the version of the headers the plugin is built with.
#define TROUPE_PLUGIN_ABI() \
  extern "C" __attribute__((visibility("default"))) int troupe_plugin_abi_version() { return TROUPE_PLUGIN_ABI_VERSION; }

// Marks the entry point for export: TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* h) {...}
#define TROUPE_PLUGIN_ENTRY extern "C" __attribute__((visibility("default")))

// A plugin that registers a filter actor under an in-process stream filter's name ("redact"):
// the two kinds share one namespace.
#include "actors/plugins/plugin_api.hpp"

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_filter_actor("redact", [](const troupe::option_map&) -> troupe::result<troupe::actors::filter_actor_spawner> {
    return troupe::make_error("never made");
  });
  return 0;
}

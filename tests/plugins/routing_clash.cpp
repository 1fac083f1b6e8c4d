// A plugin that registers a routing policy under a built-in routing policy's name ("round_robin").
#include "actors/plugins/plugin_api.hpp"

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_routing_policy("round_robin", [](const troupe::actors::routing_options&)
                                              -> troupe::result<std::unique_ptr<troupe::actors::routing_policy>> {
    return troupe::make_error("never made");
  });
  return 0;
}

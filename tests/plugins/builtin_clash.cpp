// A plugin that registers a stream filter under a built-in filter's name ("redact").
#include "actors/plugins/plugin_api.hpp"

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_stream_filter("redact", [](const troupe::option_map&) -> troupe::result<troupe::actors::filter_maker> {
    return troupe::make_error("never made");
  });
  return 0;
}

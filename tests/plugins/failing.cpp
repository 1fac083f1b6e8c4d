// A plugin whose entry point fails and says why.
#include "actors/plugins/plugin_api.hpp"

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->fail("no licence file found in /etc/example");
  return 3;
}

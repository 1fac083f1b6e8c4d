// A plugin built for another ABI: troupe must refuse it before calling its entry point.
#include "actors/plugins/plugin_api.hpp"

extern "C" __attribute__((visibility("default"))) int troupe_plugin_abi_version() {
  return TROUPE_PLUGIN_ABI_VERSION + 41;
}

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->fail("the entry point of a plugin with the wrong ABI must not run");
  return 1;
}

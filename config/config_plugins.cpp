#include "config/config_plugins.hpp"

#include "actors/plugins/plugin_loader.hpp"

namespace troupe::config {

result<located_config> resolve_config_with_plugins(const std::string& path, const std::string& exe_path,
                                                   const std::vector<config_override>& overrides) {
  auto first = resolve_config(path, exe_path, overrides, config_registries::unchecked());
  if (!first) return make_error(first.error());
  if (!first->config.plugins.empty()) {
    auto loaded = actors::load_plugins(first->config.plugins);
    if (!loaded) return make_error(first->source + ": plugins: " + loaded.error());
  }
  return resolve_config(path, exe_path, overrides, config_registries::global());
}

}  // namespace troupe::config

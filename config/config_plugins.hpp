#pragma once
// A config may use names that its plugins register (`plugins = [...]`), so the config of
// `troupe serve` (and of `troupe config check`) is read in two passes: first without checking
// names, to learn the plugins; they are loaded, in order, into the process-wide registries;
// then the config is read again with every check. A plugin that fails to load stops it with the
// library's path and the reason. Plugins load once per process: a reload that changes
// `plugins` is reported as needing a restart, like any restart key.
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "common/result.hpp"

namespace troupe::config {

result<located_config> resolve_config_with_plugins(const std::string& path, const std::string& exe_path,
                                                   const std::vector<config_override>& overrides = {});

}  // namespace troupe::config

// `troupe config check [FILE] [--set k=v ...]`: validates a config the way `troupe serve` would
// read it and prints the effective config (every key, defaults filled in) or every error, one a
// line with file, line and key. `troupe config keys` lists the keys and whether each is hot.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/command.hpp"
#include "app/serve/cluster.hpp"
#include "config/config_loader.hpp"
#include "config/config_plugins.hpp"
#include "config/config_schema.hpp"
#include "config/troupe_config.hpp"

namespace {

namespace cfg = troupe::config;

struct config_args {
  std::string file;
  std::vector<std::string> sets;
  bool show_secrets = false;
};

int check(const config_args& a) {
  std::vector<cfg::config_override> overrides;
  for (const auto& s : a.sets) {
    auto o = cfg::parse_set(s);
    if (!o) {
      std::fprintf(stderr, "troupe config check: %s\n", o.error().c_str());
      return 2;
    }
    overrides.push_back(o.value());
  }
  // Plugins are loaded (and their entry points run) so that the names they register check;
  // their log lines would mix into the TOML this prints.
  spdlog::set_level(spdlog::level::warn);
  auto c = cfg::resolve_config_with_plugins(a.file, cfg::self_executable(), overrides);
  if (!c) {
    std::fprintf(stderr, "%s\n", c.error().c_str());
    return 1;
  }
  // What serve checks before it starts, beyond the keys: the cluster's listen address and TLS.
  if (auto ok = troupe::app::check_cluster(c->config.cluster); !ok) {
    std::fprintf(stderr, "%s: %s\n", c->source.c_str(), ok.error().c_str());
    return 1;
  }
  std::printf("# %s: valid; the effective config:\n\n%s", c->source.c_str(),
              cfg::to_toml(c->config, a.show_secrets ? cfg::secrets::show : cfg::secrets::redact).c_str());
  return 0;
}

int keys() {
  for (const auto& k : cfg::config_keys()) std::printf("%-44s %s\n", k.key.c_str(), cfg::to_string(k.reload));
  return 0;
}

troupe::app::register_command reg("config", "Validate a config file, or list the config keys", [](CLI::App& sub) {
  auto a = std::make_shared<config_args>();
  sub.require_subcommand(1);
  auto* chk = sub.add_subcommand("check", "Validate FILE (default: the repository's config/troupe.toml) and print the effective config");
  chk->add_option("file", a->file, "TOML config file");
  chk->add_option("--set", a->sets, "override a key: section.key=VALUE, VALUE in TOML (repeatable)")
      ->allow_extra_args(false);
  chk->add_flag("--show-secrets", a->show_secrets, "print API keys and the admin token instead of <redacted>");
  auto* ks = sub.add_subcommand("keys", "List every config key and whether a change to it is hot or needs a restart");
  return [a, chk, ks]() {
    if (chk->parsed()) return check(*a);
    if (ks->parsed()) return keys();
    return 2;
  };
});

}  // namespace

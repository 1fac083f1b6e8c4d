// `troupe worker --join HOST:PORT`: an engine replica on this host that joins a front
// (`troupe serve` with cluster.listen) over CAF's network layer; docs/cluster.md.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/command.hpp"
#include "app/worker/worker.hpp"
#include "config/config_loader.hpp"
#include "config/config_plugins.hpp"

namespace {

namespace cfg = troupe::config;

struct worker_args {
  std::string join;
  std::string config;
  std::string name;
  std::vector<std::string> sets;
};

troupe::app::register_command reg("worker", "Run an engine replica that joins a front (troupe serve with cluster.listen)",
                                  [](CLI::App& sub) {
  auto a = std::make_shared<worker_args>();
  sub.add_option("--join", a->join, "the front's cluster address, HOST:PORT (its cluster.listen)")->required();
  sub.add_option("--config", a->config, "TOML config file (the same keys as troupe serve's: model, kv, scheduler, cluster.secret)");
  sub.add_option("--name", a->name, "how the front names this replica (default: host:pid)");
  sub.add_option("--set", a->sets, "override a key: section.key=VALUE, VALUE in TOML (repeatable)")->allow_extra_args(false);
  return [a]() {
    std::vector<cfg::config_override> overrides;
    for (const auto& s : a->sets) {
      auto o = cfg::parse_set(s);
      if (!o) {
        std::fprintf(stderr, "troupe worker: %s\n", o.error().c_str());
        return 2;
      }
      overrides.push_back(o.value());
    }
    auto c = cfg::resolve_config_with_plugins(a->config, cfg::self_executable(), overrides);
    if (!c) {
      std::fprintf(stderr, "troupe worker: invalid config:\n%s\n", c.error().c_str());
      return 2;
    }
    spdlog::set_level(spdlog::level::from_str(c->config.logging.level));
    troupe::app::worker_options o;
    o.config = c->config;
    o.join = a->join;
    o.name = a->name;
    o.config_path = a->config;
    o.overrides = std::move(overrides);
    return troupe::app::run_worker(o);
  };
});

}  // namespace

// `troupe bench`: the group command; each benchmark is its own subcommand.
#include <CLI/CLI.hpp>

#include <map>
#include <memory>

#include "app/bench_command.hpp"

namespace troupe::app {
std::vector<command_entry>& bench_registry() {
  static std::vector<command_entry> r;
  return r;
}
}  // namespace troupe::app

namespace {
troupe::app::register_command reg("bench", "Run a benchmark (engine, serve, ...)", [](CLI::App& sub) {
  sub.require_subcommand(1);
  auto runs = std::make_shared<std::map<CLI::App*, std::function<int()>>>();
  for (auto& b : troupe::app::bench_registry()) {
    auto* s = sub.add_subcommand(b.name, b.description);
    (*runs)[s] = b.setup(*s);
  }
  return [runs, &sub]() {
    for (auto* s : sub.get_subcommands()) {
      auto it = runs->find(s);
      if (it != runs->end() && it->second) return it->second();
    }
    return 1;
  };
});
}  // namespace

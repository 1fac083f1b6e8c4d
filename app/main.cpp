// troupe: one executable, subcommands registered by the app/cmd_*.cpp files.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "app/command.hpp"
#include "app/version.hpp"
#ifdef TROUPE_HAVE_CUDA
#include "gpu/cuda_backend.hpp"
#include "model/backend.hpp"
#endif

namespace troupe::app {
std::vector<command_entry>& command_registry() {
  static std::vector<command_entry> r;
  return r;
}
}  // namespace troupe::app

int main(int argc, char** argv) {
#ifdef TROUPE_HAVE_CUDA
  // The cuda backend is in troupe_gpu, which only this executable links: added here, before any
  // subcommand makes a backend, so that `model.backend = "cuda"` finds it.
  if (auto s = troupe::gpu::add_cuda_backend(troupe::model::backend_registry()); !s) {
    std::fprintf(stderr, "troupe: %s\n", s.error().c_str());
    return 1;
  }
#endif
  CLI::App app{"Troupe: an actor-based LLM serving framework"};
  app.require_subcommand(1);
  app.set_version_flag("--version", troupe::version());
  auto& reg = troupe::app::command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runs;
  for (auto& c : reg) {
    auto* sub = app.add_subcommand(c.name, c.description);
    runs[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto* sub : app.get_subcommands()) {
    auto it = runs.find(sub);
    if (it != runs.end() && it->second) return it->second();
  }
  return 1;
}

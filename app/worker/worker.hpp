#pragma once
// `troupe worker`: one engine replica (its own model, scheduler and executor) that joins a
// front's router over CAF's network layer (docs/cluster.md). It keeps trying to join while the
// front is away, frees what it ran when the link drops (the front has moved those requests), and
// on SIGTERM drains: it takes nothing new, finishes what it runs, then leaves.
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "config/troupe_config.hpp"

namespace troupe::app {

struct worker_options {
  config::troupe_config config;
  std::string join;   // the front's cluster.listen, HOST:PORT
  std::string name;   // how the front names this replica; empty: host:pid
  // Where `config` came from, read again on SIGHUP: the file ("" the default) and the --set keys.
  std::string config_path;
  std::vector<config::config_override> overrides;
};

// Runs until SIGINT/SIGTERM (drained) or a refusal; the process's exit code. SIGHUP reloads the
// worker's own config: its scheduler's keys are applied while serving (the front's reload
// changes the front's process only), the rest is reported as needing a restart.
int run_worker(const worker_options& o);

}  // namespace troupe::app

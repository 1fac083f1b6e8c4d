#pragma once
// `troupe worker`: one engine replica (its own model, scheduler and executor) that joins a
// front's router over CAF's network layer (docs/cluster.md). It keeps trying to join while the
// front is away, frees what it ran when the link drops (the front has moved those requests), and
// on SIGTERM drains: it takes nothing new, finishes what it runs, then leaves.
#include <string>

#include "config/troupe_config.hpp"

namespace troupe::app {

struct worker_options {
  config::troupe_config config;
  std::string join;   // the front's cluster.listen, HOST:PORT
  std::string name;   // how the front names this replica; empty: host:pid
};

// Runs until SIGINT/SIGTERM (drained) or a refusal; the process's exit code.
int run_worker(const worker_options& o);

}  // namespace troupe::app

#pragma once
// What changes between two configs, key by key, and how each change can be applied: while
// serving (hot: admission policy and limits, scheduler policy and budgets, cache policy,
// threshold and TTL, output filters, log level) or at the next start (restart: model, listen
// address, KV size, ...). A reload applies the hot changes and reports the others; it never
// drops one silently.
#include <set>
#include <string>
#include <vector>

#include "config/config_schema.hpp"
#include "config/troupe_config.hpp"

namespace troupe::config {

struct config_change {
  std::string key;        // "scheduler.max_num_seqs", "admission.tenants.alice.tokens_per_s", "streamer.filters"
  reload_kind reload = reload_kind::restart;
  std::string old_value;  // as TOML; empty when the key was absent (a new tenant); secrets are "<redacted>"
  std::string new_value;
};

// The changed keys, in the schema's order.
std::vector<config_change> config_diff(const troupe_config& before, const troupe_config& after);

// The pipeline stages a reload replaces to apply `changes`: the stage of each hot key
// (config_schema's stage_of), for actors::pipeline::reconfigure. Hot keys no stage holds
// (logging.level) and restart keys add none.
std::set<std::string> stages_to_replace(const std::vector<config_change>& changes);

// Whether any of `changes` needs a restart.
bool needs_restart(const std::vector<config_change>& changes);

// `next` with every restart-only key at its value in `running`: what a reload may apply while
// serving. (A reload that also changes, say, cache.path must not reopen the cache there.)
troupe_config with_restart_keys_of(const troupe_config& running, const troupe_config& next);

}  // namespace troupe::config

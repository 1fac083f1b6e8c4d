#pragma once
// Hot reload of the running config (SIGHUP, POST /admin/reload): the file is read again with
// the same command-line overrides and validated as a whole; an invalid config is rejected and
// the running one stays, with the reason. A valid one is compared with the running one key by
// key: the changes that can be applied while serving are handed to `apply` with the pipeline
// stages they touch (which it replaces), the others are reported as needing a restart — never
// silently ignored.
// Each applied reload gets the next version number (1 is the config the server started with).
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "config/config_diff.hpp"
#include "config/config_loader.hpp"
#include "config/troupe_config.hpp"
#include "common/result.hpp"

namespace troupe::config {

struct reload_result {
  bool ok = false;
  std::string error;                          // why it was rejected (the running config stays)
  int64_t version = 0;                        // the active version afterwards
  std::vector<config_change> applied;         // hot changes now in force
  std::vector<config_change> restart_needed;  // read and valid, but in force only after a restart
  std::vector<std::string> replaced;          // the actors replaced ("scheduler", "cache", ...)
};

class config_reloader {
 public:
  // Applies the hot part of a config: replaces the pipeline stages in `stages` (computed from
  // the diff: stages_to_replace), sets the log level; answers the names of the actors replaced,
  // or an error (then nothing of this reload is in force).
  using apply_fn =
      std::function<result<std::vector<std::string>>(const troupe_config& next, const std::set<std::string>& stages)>;

  config_reloader(troupe_config running, std::string path, std::string exe_path, std::vector<config_override> overrides);

  // Re-reads and applies. One reload at a time.
  reload_result reload(const apply_fn& apply);
  // Applies `next` (already validated) as a reload would; for tests and embedders.
  reload_result reload_from(const troupe_config& next, const apply_fn& apply);

  int64_t version() const;
  // The config last read (its hot keys are in force), and its keys that differ from the config
  // the process started with but need a restart to take effect.
  troupe_config active() const;
  std::vector<config_change> pending_restart() const;
  const std::string& source() const { return path_; }

 private:
  mutable std::mutex mu_;
  std::mutex reload_mu_;   // serialises reloads
  troupe_config active_;   // the last config read and applied
  troupe_config started_;  // the config the process started with
  std::string path_, exe_path_;
  std::vector<config_override> overrides_;
  int64_t version_ = 1;
  std::vector<config_change> pending_;
};

}  // namespace troupe::config

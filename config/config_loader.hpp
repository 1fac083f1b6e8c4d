#pragma once
// Reading and writing the config file (TOML, toml++). A config is validated as a whole before
// it is used: syntax, unknown keys (with the closest known key), types, ranges, names that
// must be registered (policies, embedders, filters, backends) and keys that must agree with
// each other. Every problem is reported, one a line, each naming the file, line, column and full
// key: `troupe.toml:12:1: scheduler.max_num_seqs: 0 is out of range (1..65536)`.
//
// Overrides (`--set key=value`, and serve's own flags mapped onto keys) are merged into the
// file's document before validation, in order, so a later one wins and errors in them name the
// flag they came from.
#include <string>
#include <string_view>
#include <vector>

#include "config/config_registries.hpp"
#include "config/troupe_config.hpp"
#include "common/result.hpp"

namespace troupe::config {

struct config_override {
  std::string key;     // "scheduler.max_num_seqs"
  std::string value;   // TOML: 16, "sjf", [1, 2], { a = 1 }; text that is not TOML is taken as a string
  std::string origin;  // for errors: "--set scheduler.max_num_seqs=16"
};

// `key=value`, as given to --set.
result<config_override> parse_set(const std::string& arg);

// Validates `text` (named `source_name` in errors) with `overrides` applied after it.
result<troupe_config> parse_config(std::string_view text, const std::string& source_name,
                                   const std::vector<config_override>& overrides = {},
                                   const config_registries& registries = config_registries::global());

// The text of the config file at `path`: a regular file of at most 1 MiB (errors say why not).
result<std::string> read_config_text(const std::string& path);

// Reads and validates the file at `path`.
result<troupe_config> load_config(const std::string& path, const std::vector<config_override>& overrides = {},
                                  const config_registries& registries = config_registries::global());

enum class secrets { show, redact };

// The config as a TOML document with every key (parse_config reads it back to an equal
// config). With secrets::redact, API keys and the admin token read "<redacted>" (for
// GET /admin/config).
std::string to_toml(const troupe_config& c, secrets s = secrets::show);

// The repository's default config (config/troupe.toml), looked for next to the executable
// (`exe_path`: its own path, e.g. from /proc/self/exe), then in the source tree this was built
// from, then under the working directory; "" when none exists.
std::string default_config_path(const std::string& exe_path);

// The config a command runs with: the file at `path`; without one, the default config
// (default_config_path), or the built-in defaults when there is none. `source` says which.
struct located_config {
  troupe_config config;
  std::string source;
};
result<located_config> resolve_config(const std::string& path, const std::string& exe_path,
                                      const std::vector<config_override>& overrides = {},
                                      const config_registries& registries = config_registries::global());

// This process's executable (for default_config_path); "" when it cannot be told.
std::string self_executable();

}  // namespace troupe::config

#pragma once
// The keys of the config file, without TOML in sight: each key's full name, whether a change
// to it can be applied while serving (hot) or needs a restart, and which pipeline stage a hot
// change replaces. The table behind it (config_schema.cpp) also reads and writes every key;
// config/reference.toml documents them.
//
// Key names: sections and keys joined by dots ("scheduler.max_num_seqs"). In names of keys
// that take user-chosen names, "*" stands for any one name ("admission.tenants.*.tokens_per_s")
// and "[]" for an element of an array of tables ("auth.api_keys[].tenant").
#include <string>
#include <vector>

namespace troupe::config {

enum class reload_kind {
  hot,      // applied while serving (the actor that holds it is swapped)
  restart,  // reported, and applied at the next start
};

const char* to_string(reload_kind r);

struct config_key {
  std::string key;
  reload_kind reload = reload_kind::restart;
  std::string stage;  // hot keys: the pipeline stage a change replaces (see stage_of)
};

// Every key, in the order of config/reference.toml. Keys that hold a table or an array of
// user-named entries are listed themselves ("admission.tenants") and with their entries' keys
// ("admission.tenants.*.tokens_per_s").
const std::vector<config_key>& config_keys();

// How a change to `key` (a concrete key such as "admission.tenants.alice.tokens_per_s") is
// applied; restart for a key the schema does not have.
reload_kind reload_of(const std::string& key);

// The pipeline stage ("admission", "cache", "router", "scheduler", "streamer") that a change to `key`
// replaces while serving; "" for restart keys and for hot keys no stage holds (logging.level,
// admission.max_prompt_tokens, which nothing reads yet).
std::string stage_of(const std::string& key);

// Whether a concrete key matches a key of config_keys() ("*" matches one name).
bool key_matches(const std::string& pattern, const std::string& key);

}  // namespace troupe::config

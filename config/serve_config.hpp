#pragma once
// From a troupe_config to what the code that serves takes: net::serve_options for
// `troupe serve` (net/ knows nothing of TOML or of this module), and the pipeline's and the
// backend's option structs, which the serve options carry through their `configure` hook. A
// reload builds the same structs from the new config.
#include <string>
#include <vector>

#include "config/troupe_config.hpp"

namespace troupe::net {
struct serve_options;
}
namespace troupe::actors {
struct pipeline_config;
struct response_cache_config;
}  // namespace troupe::actors
namespace troupe::model {
struct backend_options;
}

namespace troupe::config {

net::serve_options to_serve_options(const troupe_config& c);

// Sets every field of `p` the config has keys for; the rest (the model name that serve derives
// from the file, admission's n_ctx and n_vocab) is left as it is.
void apply_to(const troupe_config& c, actors::pipeline_config& p);
void apply_to(const troupe_config& c, model::backend_options& b);

actors::response_cache_config to_response_cache_config(const troupe_config& c);

// Keys set to something other than their default that nothing reads yet
// (admission.max_prompt_tokens), one message each, so that `troupe serve` can say so instead of
// ignoring them silently.
std::vector<std::string> unread_settings(const troupe_config& c);

}  // namespace troupe::config

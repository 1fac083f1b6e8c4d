#pragma once
// OpenAI's prompt-cache and moderation fields, which the chat and Responses bodies share (and
// which newer `openai` clients send, often as null): what Troupe does anyway is accepted, the
// rest refused by name.
#include "net/detail/request_reader.hpp"

namespace troupe::net::detail {

// The names prompt_cache_fields reads, for known_fields.
#define TROUPE_PROMPT_CACHE_FIELDS "prompt_cache_retention", "prompt_cache_options", "moderation"

// prompt_cache_retention "in_memory" (the prefix cache is in memory; "24h" refused),
// prompt_cache_options {mode: "implicit"} (the prefix cache finds shared prefixes by itself;
// "explicit" breakpoints and a minimum `ttl` refused), moderation refused (none is run).
void prompt_cache_fields(reader& r);

// A content part's prompt_cache_breakpoint (an explicit breakpoint): refused unless null.
void refuse_cache_breakpoint(reader& part);

}  // namespace troupe::net::detail

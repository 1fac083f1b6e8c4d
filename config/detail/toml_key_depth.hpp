#pragma once
// toml++ reads a dotted key (`a.b.c = 1`, `[a.b.c]`) by recursion, a stack frame per part: a
// line of 50,000 parts overflowed the stack (SIGSEGV) in `config check`, at startup and on a
// live reload, before any error could be given. So a config text is checked first: a key of
// more than max_key_parts parts is refused, naming its line. (No config key of Troupe's has
// more than four.)
#include <optional>
#include <string>
#include <string_view>

namespace troupe::config::detail {

inline constexpr int max_key_parts = 64;

// The error for the first key in `text` (TOML) with more than max_key_parts parts, if any.
std::optional<std::string> key_depth_error(std::string_view text, const std::string& source);

}  // namespace troupe::config::detail

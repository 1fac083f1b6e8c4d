#include "config/detail/toml_key_depth.hpp"

namespace troupe::config::detail {

// A scan, not a parser: strings and comments are skipped, and the dots between two of TOML's
// separators (= , { } [ ] and line ends) are counted. A value has at most one dot there (a
// float, a time); a key has one fewer than its parts. Hand-written because the parser itself is
// what must not see such a key.
std::optional<std::string> key_depth_error(std::string_view text, const std::string& source) {
  int line = 1, dots = 0;
  size_t i = 0;
  const auto starts = [&](std::string_view s) { return text.substr(i, s.size()) == s; };
  // Skips a string that starts at i (quote q, tripled or not); counts its line ends.
  const auto skip_string = [&](char q) {
    const bool multi = starts(std::string(3, q));
    i += multi ? 3 : 1;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '\\' && q == '"') {
        if (i + 1 < text.size() && text[i + 1] == '\n') ++line;  // a line-ending backslash
        i += 2;
        continue;
      }
      if (c == '\n') {
        ++line;
        if (!multi) return;  // an unterminated string: the parser says so
      }
      if (c == q && (!multi || starts(std::string(3, q)))) {
        i += multi ? 3 : 1;
        return;
      }
      ++i;
    }
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      skip_string(c);
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '.' && ++dots >= max_key_parts)
      return source + ": line " + std::to_string(line) + ": a key of more than " + std::to_string(max_key_parts) +
             " dotted parts (no config key has more than a few)";
    if (c == '=' || c == ',' || c == '{' || c == '}' || c == '[' || c == ']' || c == '\n') dots = 0;
    if (c == '\n') ++line;
    ++i;
  }
  return std::nullopt;
}

}  // namespace troupe::config::detail

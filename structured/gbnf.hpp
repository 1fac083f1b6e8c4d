#pragma once
// GBNF, llama-server's grammar syntax, parsed into a small IR that the matcher compiles:
//
//   name ::= alt | alt        # a comment
//   "literal" (escapes \n \r \t \" \\ \xNN \uNNNN \UNNNNNNNN), [a-z0-9_] [^"\\] classes, `.` any
//   character, ( groups ), repetition * + ? {m} {m,} {m,n}, rule references; the root rule is
//   `root`. A newline ends a rule unless inside ( ) or when the next line starts with `|`.
//
// Groups and repetitions become generated rules named "<rule>#<n>". Parsing refuses undefined
// rules, a rule defined twice, left recursion (direct or through other rules, also through rules
// that may match nothing) and rules that can never finish, each by name; syntax errors name the
// line and column and what was expected.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace troupe::structured {

// Inclusive range of Unicode code points.
struct code_range {
  uint32_t lo = 0, hi = 0;
  bool operator==(const code_range& o) const { return lo == o.lo && hi == o.hi; }
};
inline constexpr uint32_t max_code_point = 0x10FFFF;

// Decodes one UTF-8 code point at s[i] and advances i past it; an ill-formed sequence (a stray
// or truncated byte, an overlong run past U+10FFFF) decodes as its first byte's value, so grammar
// and pattern text with invalid bytes stays matchable byte for byte. s[i] must exist.
uint32_t decode_utf8_or_byte(std::string_view s, size_t& i);

struct gbnf_symbol {
  enum class type : uint8_t { chars, rule };
  type t = type::chars;
  std::vector<code_range> ranges;  // chars: sorted, disjoint, negation already applied
  uint32_t rule = 0;               // rule: index into gbnf_grammar::rules
};
using gbnf_sequence = std::vector<gbnf_symbol>;

struct gbnf_rule {
  std::string name;
  std::vector<gbnf_sequence> alts;  // an empty sequence matches the empty string
};

struct gbnf_grammar {
  std::vector<gbnf_rule> rules;
  uint32_t root = 0;
  int32_t find(std::string_view name) const;  // -1 when absent
};

result<gbnf_grammar> parse_gbnf(std::string_view text, std::string_view root_rule = "root");

// A quoted GBNF literal matching exactly `text` (UTF-8 kept as is; quotes, backslashes and control
// bytes escaped).
std::string gbnf_literal(std::string_view text);
// A GBNF character class matching exactly the code points of `ranges` (sorted, disjoint, not
// empty: GBNF has no class that matches nothing), e.g. [a-z0-9_].
std::string gbnf_class(const std::vector<code_range>& ranges);

// Sorts and merges overlapping or adjacent ranges.
std::vector<code_range> normalize_ranges(std::vector<code_range> r);
// Every code point (0..max_code_point) not in `r` (normalized).
std::vector<code_range> complement_ranges(const std::vector<code_range>& r);

}  // namespace troupe::structured

#pragma once
// Regular expressions and choice lists, translated to GBNF (the one form every constraint kind
// is matched in: gbnf.hpp).
//
// The regex subset: literals, escapes (\n \t \r \f \v \xNN \uNNNN, escaped punctuation), classes
// [a-z] [^...] with \d \w \s (and \D \W \S outside classes), `.` (any character but newline),
// alternation |, groups ( ) (?: ) (?P<name> ) (?<name> ), quantifiers * + ? {m} {m,} {m,n} (lazy
// forms accepted: they match the same strings), ^ at the start and $ at the end. Refused by name:
// backreferences, lookahead/lookbehind, word boundaries, possessive quantifiers, inline flags.
// The pattern must match the whole output (as vLLM's `regex` does).
#include <string>
#include <string_view>

#include "common/result.hpp"

namespace troupe::structured {

// A GBNF expression (usable as a rule's right-hand side) matching exactly the strings the
// pattern matches. With `json_string`, the expression matches the JSON-encoded contents of such
// strings (between the quotes): '"' and '\' appear escaped, as do \n \r \t; other control
// characters are left out. Errors name the problem and its offset in the pattern.
result<std::string> regex_to_gbnf(std::string_view pattern, bool json_string = false);

// `choice`: a JSON array of strings -> a GBNF expression matching exactly one of them.
result<std::string> choice_to_gbnf(std::string_view json_array);

}  // namespace troupe::structured

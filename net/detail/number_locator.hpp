#pragma once
// Where in a JSON body the number lies that simdjson refused as out of range: its parse error
// carries no location, and a client must be told which field to fix (parse_object,
// net/detail/request_reader.hpp, names it in its 400).
#include <string>
#include <string_view>

namespace troupe::net::detail {

// Whether a JSON number's text is one simdjson reads: a double's range (an underflow reads as 0,
// as simdjson reads it), and an integer (no fraction, no exponent) within int64 or uint64.
bool number_in_range(std::string_view text);

// The field path of the first number in `body` that number_in_range refuses ("temperature",
// "messages[2].content", "logit_bias.13"), or "" when there is none. It scans the text by hand,
// so it is only meant for a body simdjson refused with a number error, and costs one pass over
// at most the body limit's bytes.
std::string locate_bad_number(std::string_view body);

}  // namespace troupe::net::detail

#pragma once
// The JSON Schema keywords the compiler reads (structured/json_schema.cpp) and what each one's
// value must be: a keyword of the wrong kind is refused by name wherever it stands (for whichever
// type, in branches that never read it), never read as absent — `"maximum": "5"`, draft 4's
// `"exclusiveMinimum": true`, `"properties": [1]` or `"format": 5` would let the output break what
// the schema meant.
#include <simdjson.h>

#include <set>
#include <string>
#include <string_view>

namespace troupe::structured::detail {

// Keywords that describe and never constrain (title, description, examples, ...).
const std::set<std::string_view>& annotations();
// Whether `k` is a keyword the compiler reads (annotations aside).
bool is_schema_keyword(std::string_view k);
// "" when `e` is a value keyword `k` may take (or `k` is not one the compiler reads), else why not:
// "'maximum' must be a number", "'exclusiveMinimum' must be a number (the draft-4 boolean form is
// not supported)".
std::string keyword_value_error(std::string_view k, simdjson::dom::element e);
// A JSON number's value, as a double; false for anything else.
bool number_value(simdjson::dom::element e, double& v);

}  // namespace troupe::structured::detail

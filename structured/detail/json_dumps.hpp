#pragma once
// A JSON value in the layout of Python's json.dumps with its defaults ({"a": 1, "b": [1, 2]}),
// the one layout constrained output is written in: the JSON Schema compiler
// (structured/json_schema.cpp) generates enum and const values verbatim in it.
#include <simdjson.h>

#include <string>

namespace troupe::structured::detail {

std::string json_dumps(simdjson::dom::element e);

}  // namespace troupe::structured::detail

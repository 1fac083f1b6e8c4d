#pragma once
// JSON checks for the fuzz targets of net/: what Troupe writes back must parse, whatever bytes
// the client sent (simdjson also rejects invalid UTF-8 in strings).
#include <string>
#include <string_view>

#include <simdjson.h>

#include "fuzz/fuzz_check.hpp"

namespace troupe::fuzz {

// The JSON text `s` parsed as an object; aborts when it is not one.
inline simdjson::dom::object must_be_object(simdjson::dom::parser& p, const std::string& s) {
  simdjson::dom::object obj;
  const auto err = p.parse(s).get(obj);
  if (err) {
    std::fprintf(stderr, "not a JSON object (%s): %s\n", simdjson::error_message(err), s.c_str());
    broken("written JSON parses as an object", __FILE__, __LINE__);
  }
  return obj;
}

}  // namespace troupe::fuzz

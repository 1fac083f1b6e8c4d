#pragma once
// Whether a codec's output parses as JSON: shared by the net/ codec tests.
#include <string>

#include <simdjson.h>

namespace troupe::net::test {

inline bool valid_json(const std::string& s) {
  simdjson::dom::parser p;
  simdjson::dom::element e;
  return p.parse(s).get(e) == simdjson::SUCCESS;
}

}  // namespace troupe::net::test

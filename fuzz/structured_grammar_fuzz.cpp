// Fuzzes the structured-output grammar front ends (structured/gbnf.cpp, json_schema.cpp,
// regex.cpp). Input: a byte picking the front end (GBNF text, a JSON schema, a regex, a
// `choice` array, a literal), then its text. Invariants: no crash; a refusal says why; every
// grammar the schema, regex, choice and literal writers produce is one parse_gbnf accepts; an
// accepted grammar's rule references and root point at rules that exist, and its character
// ranges are sorted, disjoint and within Unicode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.hpp"
#include "structured/gbnf.hpp"
#include "structured/json_schema.hpp"
#include "structured/regex.hpp"

using namespace troupe;

namespace {

void check_grammar(const structured::gbnf_grammar& g) {
  FUZZ_CHECK(g.root < g.rules.size());
  for (const auto& r : g.rules)
    for (const auto& alt : r.alts)
      for (const auto& s : alt) {
        if (s.t == structured::gbnf_symbol::type::rule) {
          FUZZ_CHECK(s.rule < g.rules.size());
          continue;
        }
        for (size_t i = 0; i < s.ranges.size(); ++i) {
          FUZZ_CHECK(s.ranges[i].lo <= s.ranges[i].hi && s.ranges[i].hi <= structured::max_code_point);
          if (i > 0) FUZZ_CHECK(s.ranges[i - 1].hi < s.ranges[i].lo);
        }
      }
}

// A grammar Troupe wrote itself must parse. `expression`: the text is a rule's right-hand side
// (what regex_to_gbnf and choice_to_gbnf give), made the root rule.
void check_written(result<std::string> text, bool expression = false) {
  if (text.ok() && expression) text = "root ::= " + text.value();
  if (!text.ok()) {
    FUZZ_CHECK(!text.error().empty());
    return;
  }
  const auto g = structured::parse_gbnf(text.value());
  if (!g.ok()) std::fprintf(stderr, "%s\n---\n%s\n", g.error().c_str(), text.value().c_str());
  FUZZ_CHECK(g.ok());
  check_grammar(g.value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0: {
      const auto g = structured::parse_gbnf(text);
      if (g.ok()) check_grammar(g.value());
      else FUZZ_CHECK(!g.error().empty());
      break;
    }
    case 1: check_written(structured::json_schema_to_gbnf(text)); break;
    case 2: check_written(structured::regex_to_gbnf(text, data[0] & 0x10), true); break;
    case 3: check_written(structured::choice_to_gbnf(text), true); break;
    case 4: check_written(structured::gbnf_literal(text), true); break;
  }
  return 0;
}

// structured/detail/json_dumps: a value in json.dumps' default layout, the text enum and const
// values are generated as (Python's own json.dumps output is quoted in each case).
#include "structured/detail/json_dumps.hpp"

#include <gtest/gtest.h>

using namespace troupe::structured::detail;

namespace {

std::string dumps(const std::string& json) {
  static simdjson::dom::parser parser;
  return json_dumps(parser.parse(json).value());
}

}  // namespace

TEST(JsonDumps, SeparatorsAreCommaSpaceAndColonSpace) {
  EXPECT_EQ(dumps(R"({"a":1,"b":[1,2,{"c":null}],"d":{}})"), R"({"a": 1, "b": [1, 2, {"c": null}], "d": {}})");
  EXPECT_EQ(dumps("[ ]"), "[]");
  EXPECT_EQ(dumps(R"( [true , false] )"), "[true, false]");
}

TEST(JsonDumps, KeysAreEscapedAsStrings) {
  // json.dumps({'q"\\': 1, 'tab\t': 2, '\x01': 3}) == '{"q\\"\\\\": 1, "tab\\t": 2, "\\u0001": 3}'
  EXPECT_EQ(dumps(R"({"q\"\\":1,"tab\u0009":2,"\u0001":3})"), R"({"q\"\\": 1, "tab\t": 2, "\u0001": 3})");
  // Values are escaped the same way.
  EXPECT_EQ(dumps(R"(["a\u0009b\u0001"])"), R"(["a\tb\u0001"])");
}

TEST(JsonDumps, ScalarsKeepTheirText) {
  EXPECT_EQ(dumps(R"("caf\u00e9 \"x\"")"), "\"caf\xc3\xa9 \\\"x\\\"\"");
  EXPECT_EQ(dumps("-1.5e3"), "-1500.0");
  EXPECT_EQ(dumps("42"), "42");
}

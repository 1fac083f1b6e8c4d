// structured/detail/schema_keywords: what each keyword's value must be, said by name (the
// compiler's refusals with their locations are in json_schema_test).
#include "structured/detail/schema_keywords.hpp"

#include <gtest/gtest.h>

using namespace troupe::structured::detail;

namespace {

std::string error_for(std::string_view k, const char* json) {
  static simdjson::dom::parser parser;
  simdjson::dom::element e = parser.parse(std::string(json)).value();
  return keyword_value_error(k, e);
}

}  // namespace

TEST(SchemaKeywords, EachKeywordSaysWhatItsValueMustBe) {
  EXPECT_EQ(error_for("maximum", "5"), "");
  EXPECT_EQ(error_for("maximum", "\"5\""), "'maximum' must be a number");
  EXPECT_EQ(error_for("exclusiveMinimum", "true"),
            "'exclusiveMinimum' must be a number (the draft-4 boolean form is not supported)");
  EXPECT_EQ(error_for("maxLength", "2.0"), "") << "a whole number counts as an integer";
  EXPECT_EQ(error_for("maxLength", "-1"), "'maxLength' must be a non-negative integer");
  EXPECT_EQ(error_for("properties", "[1]"), "'properties' must be an object of schemas (objects or booleans)");
  EXPECT_EQ(error_for("items", "[{}]"), "'items' must be a boolean or a schema object (the draft-4 array form is 'prefixItems' now)");
  EXPECT_EQ(error_for("anyOf", "[]"), "'anyOf' must be a non-empty array of schemas (objects or booleans)");
  EXPECT_EQ(error_for("const", "{\"a\": [1]}"), "");
  EXPECT_EQ(error_for("title", "5"), "") << "annotations are not checked";
  EXPECT_EQ(error_for("patternProperties", "5"), "") << "not a keyword the compiler reads: refused elsewhere";
}

TEST(SchemaKeywords, KeywordsAndAnnotationsAreTold) {
  EXPECT_TRUE(is_schema_keyword("minItems"));
  EXPECT_FALSE(is_schema_keyword("title"));
  EXPECT_TRUE(annotations().count("title"));
  EXPECT_FALSE(is_schema_keyword("patternProperties"));
}

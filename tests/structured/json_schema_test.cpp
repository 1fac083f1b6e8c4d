// JSON Schema -> GBNF: each supported keyword accepts the documents it should and refuses the
// others (matched byte by byte), and every unsupported keyword is refused by name and pointer.
#include "structured/json_schema.hpp"

#include <gtest/gtest.h>

#include "structured/constraint.hpp"

using namespace troupe::structured;

namespace {

std::shared_ptr<const token_vocabulary> byte_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  static auto v = std::make_shared<const token_vocabulary>(t);
  return v;
}

class schema {
 public:
  explicit schema(const std::string& s) {
    auto c = compile({kind::json_schema, s}, byte_vocab());
    EXPECT_TRUE(c.ok()) << c.error();
    if (c.ok()) c_ = c.value();
  }
  bool accepts(const std::string& doc) const {
    if (!c_) return false;
    matcher m(c_);
    for (char ch : doc)
      if (!m.accept(static_cast<uint8_t>(ch))) return false;
    return m.can_end();
  }

 private:
  std::shared_ptr<const compiled_constraint> c_;
};

std::string error_of(const std::string& s) {
  auto g = json_schema_to_gbnf(s);
  EXPECT_FALSE(g.ok()) << s;
  return g.ok() ? "" : g.error();
}

}  // namespace

TEST(JsonSchema, ScalarTypes) {
  EXPECT_TRUE(schema(R"({"type": "string"})").accepts(R"("a \"q\" \u00e9 é")"));
  EXPECT_FALSE(schema(R"({"type": "string"})").accepts("\"a\nb\""));
  schema num(R"({"type": "number"})");
  for (const char* ok : {"0", "-1.5", "3e10", "2.5E-3", "120"}) EXPECT_TRUE(num.accepts(ok)) << ok;
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "NaN"}) EXPECT_FALSE(num.accepts(bad)) << bad;
  schema integer(R"({"type": "integer"})");
  EXPECT_TRUE(integer.accepts("-42"));
  EXPECT_FALSE(integer.accepts("4.2"));
  EXPECT_FALSE(integer.accepts("12345678901234567"));  // 17 digits: bounded on purpose
  EXPECT_TRUE(schema(R"({"type": "boolean"})").accepts("false"));
  EXPECT_TRUE(schema(R"({"type": "null"})").accepts("null"));
  schema either(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(either.accepts("7"));
  EXPECT_TRUE(either.accepts("null"));
  EXPECT_FALSE(either.accepts("\"7\""));
}

TEST(JsonSchema, ObjectsInSchemaOrderWithOptionalProperties) {
  schema s(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
               "required": ["b"]})");
  EXPECT_TRUE(s.accepts(R"({"a": 1, "b": "x", "c": true})"));
  EXPECT_TRUE(s.accepts(R"({"b": "x"})"));
  EXPECT_TRUE(s.accepts(R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(s.accepts(R"({"b": "x", "c": false})"));
  EXPECT_FALSE(s.accepts(R"({"a": 1})"));                   // b is required
  EXPECT_FALSE(s.accepts(R"({"b": "x", "a": 1})"));         // schema order
  EXPECT_FALSE(s.accepts(R"({"b":"x"})"));                  // the one layout: ": "
  EXPECT_FALSE(s.accepts(R"({"b": "x", "d": 1})"));         // only the listed properties
  EXPECT_FALSE(s.accepts("{ \"b\": \"x\"}"));
  schema all_optional(R"({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}})");
  EXPECT_TRUE(all_optional.accepts("{}"));
  EXPECT_TRUE(all_optional.accepts(R"({"y": 2})"));
  EXPECT_FALSE(all_optional.accepts(R"({, "y": 2})"));
}

TEST(JsonSchema, AdditionalPropertiesAndFreeObjects) {
  schema map(R"({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2})");
  EXPECT_TRUE(map.accepts("{}"));
  EXPECT_TRUE(map.accepts(R"({"k": 1, "j": 2})"));
  EXPECT_FALSE(map.accepts(R"({"k": 1, "j": 2, "i": 3})"));
  EXPECT_FALSE(map.accepts(R"({"k": "v"})"));
  schema free(R"({"type": "object"})");
  EXPECT_TRUE(free.accepts(R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(schema(R"({"type": "object", "additionalProperties": false})").accepts("{}"));
  EXPECT_FALSE(schema(R"({"type": "object", "additionalProperties": false})").accepts(R"({"a": 1})"));
}

TEST(JsonSchema, ArraysItemsPrefixItemsAndCounts) {
  schema s(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(s.accepts("[1]"));
  EXPECT_TRUE(s.accepts("[1, 2, 3]"));
  EXPECT_FALSE(s.accepts("[]"));
  EXPECT_FALSE(s.accepts("[1, 2, 3, 4]"));
  EXPECT_FALSE(s.accepts("[1,2]"));
  schema tuple(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "items": false})");
  EXPECT_TRUE(tuple.accepts(R"(["a", 1.5])"));
  EXPECT_FALSE(tuple.accepts(R"(["a", 1.5, 2])"));
  EXPECT_FALSE(tuple.accepts(R"([1.5, "a"])"));
  schema any_items(R"({"type": "array"})");
  EXPECT_TRUE(any_items.accepts(R"([1, "a", [true]])"));
}

TEST(JsonSchema, EnumConstAnyOfOneOfAllOf) {
  schema e(R"({"enum": ["red", 2, null, {"a": [1, 2]}]})");
  EXPECT_TRUE(e.accepts(R"("red")"));
  EXPECT_TRUE(e.accepts("2"));
  EXPECT_TRUE(e.accepts("null"));
  EXPECT_TRUE(e.accepts(R"({"a": [1, 2]})"));
  EXPECT_FALSE(e.accepts(R"("blue")"));
  EXPECT_TRUE(schema(R"({"const": "v1"})").accepts(R"("v1")"));
  EXPECT_FALSE(schema(R"({"const": "v1"})").accepts(R"("v2")"));
  schema any(R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})");
  EXPECT_TRUE(any.accepts(R"("x")"));
  EXPECT_TRUE(any.accepts("3"));
  EXPECT_FALSE(any.accepts("true"));
  EXPECT_TRUE(schema(R"({"oneOf": [{"type": "boolean"}, {"type": "null"}]})").accepts("null"));
  schema all(R"({"allOf": [{"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                           {"properties": {"tag": {"type": "string"}}, "required": ["tag"]}]})");
  EXPECT_TRUE(all.accepts(R"({"id": 1, "tag": "t"})"));
  EXPECT_FALSE(all.accepts(R"({"id": 1})"));
}

TEST(JsonSchema, RefsToDefsAndDefinitionsAsPydanticEmits) {
  schema s(R"({"$defs": {"Pet": {"properties": {"name": {"title": "Name", "type": "string"}}, "required": ["name"],
               "title": "Pet", "type": "object"}}, "properties": {"pet": {"$ref": "#/$defs/Pet"},
               "nick": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Nick"}},
               "required": ["pet"], "title": "Owner", "type": "object"})");
  EXPECT_TRUE(s.accepts(R"({"pet": {"name": "Rex"}})"));
  EXPECT_TRUE(s.accepts(R"({"pet": {"name": "Rex"}, "nick": null})"));
  EXPECT_FALSE(s.accepts(R"({"pet": {}})"));
  schema d(R"({"definitions": {"N": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/definitions/N"}})");
  EXPECT_TRUE(d.accepts("[1, 2]"));
  schema tree(R"({"$defs": {"T": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}}}},
                  "$ref": "#/$defs/T"})");
  EXPECT_TRUE(tree.accepts(R"({"kids": [{"kids": [{}]}, {}]})"));
  // A definition named like a shared rule keeps its own meaning.
  schema named(R"({"$defs": {"string": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/string"},
                   "prefixItems": [{"type": "string"}]})");
  EXPECT_TRUE(named.accepts(R"(["a", 1, 2])"));
  EXPECT_FALSE(named.accepts(R"(["a", "b"])"));
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/Missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "other.json#/a"})").find("only local $ref"), std::string::npos);
}

TEST(JsonSchema, StringLengthFormatsAndPatterns) {
  schema len(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(len.accepts(R"("ab")"));
  EXPECT_TRUE(len.accepts(R"("abé")"));
  EXPECT_FALSE(len.accepts(R"("a")"));
  EXPECT_FALSE(len.accepts(R"("abcd")"));
  EXPECT_TRUE(schema(R"({"type": "string", "format": "date"})").accepts(R"("2024-02-29")"));
  EXPECT_FALSE(schema(R"({"type": "string", "format": "date"})").accepts(R"("2024-13-01")"));
  EXPECT_TRUE(schema(R"({"type": "string", "format": "time"})").accepts(R"("23:59:01Z")"));
  EXPECT_TRUE(schema(R"({"type": "string", "format": "date-time"})").accepts(R"("2024-05-01T10:00:00.123+02:00")"));
  EXPECT_TRUE(schema(R"({"type": "string", "format": "uuid"})").accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(schema(R"({"type": "string", "format": "uuid"})").accepts(R"("123e4567")"));
  EXPECT_TRUE(schema(R"({"type": "string", "format": "email"})").accepts(R"("a.b@example.co.uk")"));
  EXPECT_FALSE(schema(R"({"type": "string", "format": "email"})").accepts(R"("not an email")"));
  schema pat(R"({"type": "string", "pattern": "^[A-Z]{2}\\d+$"})");
  EXPECT_TRUE(pat.accepts(R"("AB12")"));
  EXPECT_FALSE(pat.accepts(R"("A12")"));
  EXPECT_NE(error_of(R"({"type": "string", "format": "hostname"})").find("unsupported string format 'hostname'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "(a)\\1"})").find("backreferences"), std::string::npos);
}

// RFC 5321 domains: labels start and end with a letter or digit, at least two of them. The
// model once wrote "...%2@-.-", which the grammar admitted.
TEST(JsonSchema, EmailDomainLabelsStartAndEndWithALetterOrDigit) {
  schema email(R"({"type": "string", "format": "email"})");
  for (const char* ok : {"a@b.co", "first.last+tag@sub.example.org", "x@a-b.c0", "x@a--b.example", "x@1.2"})
    EXPECT_TRUE(email.accepts("\"" + std::string(ok) + "\"")) << ok;
  for (const char* bad : {"x@-.-", "x@a-.com", "x@-a.com", "x@.com", "x@com.", "x@com", "x@a..com", "x@a.-", "@a.com"})
    EXPECT_FALSE(email.accepts("\"" + std::string(bad) + "\"")) << bad;
  const std::string l63(63, 'a');
  EXPECT_TRUE(email.accepts("\"x@" + l63 + ".com\"")) << "a label of 63";
  EXPECT_FALSE(email.accepts("\"x@" + l63 + "a.com\"")) << "a label of 64";
}

TEST(JsonSchema, NumericBoundsOnlyWhereHonest) {
  schema r(R"({"type": "integer", "minimum": -2, "exclusiveMaximum": 3})");
  EXPECT_TRUE(r.accepts("-2"));
  EXPECT_TRUE(r.accepts("2"));
  EXPECT_FALSE(r.accepts("3"));
  EXPECT_FALSE(r.accepts("-3"));
  EXPECT_TRUE(schema(R"({"type": "integer", "minimum": 0})").accepts("0"));
  EXPECT_FALSE(schema(R"({"type": "integer", "minimum": 0})").accepts("-1"));
  EXPECT_FALSE(schema(R"({"type": "integer", "minimum": 1})").accepts("0"));
  EXPECT_FALSE(schema(R"({"type": "number", "minimum": 0})").accepts("-0.5"));
  auto e = error_of(R"({"type": "object", "properties": {"p": {"type": "number", "maximum": 10}}})");
  EXPECT_NE(e.find("at /properties/p"), std::string::npos) << e;
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": 0, "maximum": 100000})").find("wider than 1000"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": 5})").find("cannot be expressed"), std::string::npos);
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByNameAndPointer) {
  auto e = error_of(R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'uniqueItems' at /properties/tags");
  e = error_of(R"({"patternProperties": {"^x": {}}})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'patternProperties' at /");
  e = error_of(R"({"type": "array", "items": {"not": {"type": "string"}}})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'not' at /items");
  e = error_of(R"({"anyOf": [{"type": "string"}, {"if": {}}]})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'if' at /anyOf/1");
  EXPECT_NE(error_of(R"({"type": "object", "required": ["x"], "properties": {}})").find("required property 'x'"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(error_of("false").find("accepts nothing"), std::string::npos);
}

TEST(JsonSchema, AnnotationsAreIgnored) {
  schema s(R"({"title": "T", "description": "d", "examples": [1], "$schema": "https://json-schema.org/draft/2020-12/schema",
               "type": "integer", "default": 3})");
  EXPECT_TRUE(s.accepts("3"));
}

TEST(JsonSchema, RulesArePrefixedSoSchemasCompose) {
  auto a = json_schema_to_gbnf(R"({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})", "f-args");
  ASSERT_TRUE(a.ok()) << a.error();
  for (size_t p = 0; (p = a.value().find('\n', p)) != std::string::npos && p + 1 < a.value().size(); ++p)
    EXPECT_EQ(a.value().compare(p + 1, 7, "f-args-"), 0) << a.value();
  const std::string composed = "root ::= \"<tool_call>\\n{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \" f-args \"}\\n</tool_call>\"\n" + a.value();
  auto c = compile({kind::grammar, composed}, byte_vocab());
  ASSERT_TRUE(c.ok()) << c.error();
  matcher m(c.value());
  for (char ch : std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>"))
    ASSERT_TRUE(m.accept(static_cast<uint8_t>(ch)));
  EXPECT_TRUE(m.must_end());
}

TEST(JsonSchema, JsonObjectKindIsBoundedInDepth) {
  auto c = compile({kind::json_object, ""}, byte_vocab());
  ASSERT_TRUE(c.ok());
  auto accepts = [&](const std::string& doc) {
    matcher m(c.value());
    for (char ch : doc)
      if (!m.accept(static_cast<uint8_t>(ch))) return false;
    return m.can_end();
  };
  EXPECT_TRUE(accepts(R"({"a": {"b": [1, 2.5, "x", true, null]}})"));
  EXPECT_FALSE(accepts("[1]"));  // an object, not any value
  EXPECT_TRUE(accepts(R"({"a": [[[[[[[1]]]]]]]})"));        // 8 levels
  EXPECT_FALSE(accepts(R"({"a": [[[[[[[[1]]]]]]]]})"));     // 9 levels
  EXPECT_EQ(json_object_gbnf("x").rfind("x ::= ", 0), 0u);
}

TEST(JsonSchema, IntegerRangesAcceptExactlyTheirNumbers) {
  // Written as a trie of digits (few matcher stacks per state): every number in, none out.
  auto r = schema(R"({"type": "integer", "minimum": -12, "maximum": 130})");
  for (int x = -200; x <= 300; ++x) EXPECT_EQ(r.accepts(std::to_string(x)), x >= -12 && x <= 130) << x;
  for (const char* bad : {"007", "-0", "1.0", "", "-", "13 0"}) EXPECT_FALSE(r.accepts(bad)) << bad;
  auto one = schema(R"({"type": "integer", "minimum": 7, "maximum": 7})");
  EXPECT_TRUE(one.accepts("7"));
  EXPECT_FALSE(one.accepts("70"));
}

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
  // `type` next to `enum`: only the values of that type (an integer has no fraction).
  schema typed(R"({"type": "string", "enum": ["a", 1, 2]})");
  EXPECT_TRUE(typed.accepts(R"("a")"));
  EXPECT_FALSE(typed.accepts("1"));
  schema whole(R"({"type": "integer", "enum": [1.5, 2, 3.0]})");
  EXPECT_TRUE(whole.accepts("2"));
  EXPECT_TRUE(whole.accepts("3.0"));
  EXPECT_FALSE(whole.accepts("1.5"));
  EXPECT_TRUE(schema(R"({"type": ["string", "null"], "enum": ["a", null, 1]})").accepts("null"));
  EXPECT_EQ(error_of(R"({"type": "string", "enum": [1, 2]})"),
            "json_schema: 'enum' has no value of type 'string': nothing satisfies this schema at /");
  EXPECT_NE(error_of(R"({"anyOf": [{"type": "string", "enum": [5]}]})"), "");
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
  EXPECT_FALSE(schema(R"({"type": "string", "format": "date"})").accepts(R"("0000-01-01")")) << "no year 0 (pydantic refuses it)";
  for (const char* year : {"0001", "0010", "0100", "1000", "9999"})
    EXPECT_TRUE(schema(R"({"type": "string", "format": "date"})").accepts(std::string("\"") + year + "-01-01\"")) << year;
  EXPECT_FALSE(schema(R"({"type": "string", "format": "date-time"})").accepts(R"("0000-01-01T00:00:00Z")"));
  // An unknown format is what is named, not its combination with lengths.
  auto ipv4 = json_schema_to_gbnf(R"({"type": "string", "format": "ipv4", "minLength": 1, "maxLength": 20})");
  ASSERT_FALSE(ipv4);
  EXPECT_NE(ipv4.error().find("unsupported string format 'ipv4'"), std::string::npos) << ipv4.error();
  // uri, with the lengths pydantic's AnyUrl / HttpUrl give it.
  for (const char* s : {R"({"type": "string", "format": "uri"})", R"({"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083})"}) {
    schema url(s);
    for (const char* ok : {R"("https://example.com/a/b?x=1&y=%20#top")", R"("mailto:a@b.org")", R"("urn:isbn:0451450523")",
                           R"("http://[::1]:8080/")"})
      EXPECT_TRUE(url.accepts(ok)) << s << " " << ok;
    for (const char* bad : {R"("")", R"("example.com")", R"("https://a b")", R"("://x")", R"("1http://x")", R"("http:")",
                            R"("http://x\"y")"})
      EXPECT_FALSE(url.accepts(bad)) << s << " " << bad;
  }
  schema short_url(R"({"type": "string", "format": "uri", "minLength": 10, "maxLength": 30})");
  EXPECT_TRUE(short_url.accepts(R"("http://abcd.io")"));
  EXPECT_FALSE(short_url.accepts(R"("a:b")")) << "below minLength";
  EXPECT_FALSE(short_url.accepts(R"("https://example.com/a-long-path/x")")) << "above maxLength";
  EXPECT_FALSE(json_schema_to_gbnf(R"({"type": "string", "format": "uri", "maxLength": 5})"));
  EXPECT_FALSE(json_schema_to_gbnf(R"({"type": "string", "format": "date", "maxLength": 20})")) << "lengths with uri only";
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

// A bound of the wrong kind was once read as absent: "maximum": "5" generated 6, and
// "maxLength": "3" was refused as "maxLength below minLength".
TEST(JsonSchema, BoundsOfTheWrongKindAreRefusedByNameAndPointer) {
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {"type": "integer", "maximum": "5"}}})"),
            "json_schema: 'maximum' must be a number at /properties/a");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": "1", "maximum": 2})"), "json_schema: 'minimum' must be a number at /");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})"),
            "json_schema: 'exclusiveMinimum' must be a number (the draft-4 boolean form is not supported) at /");
  EXPECT_EQ(error_of(R"({"type": "number", "maximum": 1, "exclusiveMaximum": false})"),
            "json_schema: 'exclusiveMaximum' must be a number (the draft-4 boolean form is not supported) at /");
  EXPECT_EQ(error_of(R"({"type": "integer", "exclusiveMaximum": null})"), "json_schema: 'exclusiveMaximum' must be a number at /");
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": [0]})"), "json_schema: 'minimum' must be a number at /");
  // Counts: a non-negative integer (3.0 is one), whichever type the schema has.
  EXPECT_EQ(error_of(R"({"type": "string", "maxLength": "3"})"), "json_schema: 'maxLength' must be a non-negative integer at /");
  EXPECT_EQ(error_of(R"({"maxLength": -1})"), "json_schema: 'maxLength' must be a non-negative integer at /");
  EXPECT_EQ(error_of(R"({"type": "string", "minLength": 1.5})"), "json_schema: 'minLength' must be a non-negative integer at /");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"type": "array", "minItems": true}})"),
            "json_schema: 'minItems' must be a non-negative integer at /items");
  EXPECT_EQ(error_of(R"({"type": "array", "maxItems": -2})"), "json_schema: 'maxItems' must be a non-negative integer at /");
  EXPECT_EQ(error_of(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": "1"})"),
            "json_schema: 'minProperties' must be a non-negative integer at /");
  EXPECT_EQ(error_of(R"({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 0.5})"),
            "json_schema: 'maxProperties' must be a non-negative integer at /");
  EXPECT_EQ(error_of(R"({"anyOf": [{"type": "integer"}, {"type": "integer", "maxLength": "3"}]})"),
            "json_schema: 'maxLength' must be a non-negative integer at /anyOf/1");
  EXPECT_EQ(error_of(R"({"$defs": {"N": {"type": "integer", "maximum": "9"}}, "$ref": "#/$defs/N"})"),
            "json_schema: 'maximum' must be a number at /$defs/N");
  // Numeric bounds of the right kind constrain as before.
  schema len(R"({"type": "string", "minLength": 1.0, "maxLength": 2})");
  EXPECT_TRUE(len.accepts(R"("ab")"));
  EXPECT_FALSE(len.accepts(R"("")"));
  EXPECT_FALSE(len.accepts(R"("abc")"));
  schema items(R"({"type": "array", "items": {"type": "integer"}, "minItems": 0, "maxItems": 2.0})");
  EXPECT_TRUE(items.accepts("[]"));
  EXPECT_FALSE(items.accepts("[1, 2, 3]"));
  schema map(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1})");
  EXPECT_TRUE(map.accepts(R"({"k": 1})"));
  EXPECT_FALSE(map.accepts("{}"));
  schema r(R"({"type": "integer", "exclusiveMinimum": 0.5, "maximum": 3.7})");
  for (int x = -2; x <= 6; ++x) EXPECT_EQ(r.accepts(std::to_string(x)), x >= 1 && x <= 3) << x;
}

// Every other keyword read with a typed getter once took a value of the wrong kind as absent:
// "format": 5 gave any string, "properties": [1] any object, "additionalProperties": "no" an
// open object, "$defs": 5 nothing at all.
TEST(JsonSchema, KeywordValuesOfTheWrongKindAreRefusedByNameAndPointer) {
  EXPECT_EQ(error_of(R"({"type": "string", "format": 5})"), "json_schema: 'format' must be a string at /");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"s": {"type": "string", "pattern": 7}}})"),
            "json_schema: 'pattern' must be a string at /properties/s");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": [1]})"),
            "json_schema: 'properties' must be an object of schemas (objects or booleans) at /");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": 5}})"),
            "json_schema: 'properties' must be an object of schemas (objects or booleans) at /");
  EXPECT_EQ(error_of(R"({"type": "object", "additionalProperties": "no"})"),
            "json_schema: 'additionalProperties' must be a boolean or a schema object at /");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {}}, "required": "a"})"),
            "json_schema: 'required' must be an array of strings at /");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {}}, "required": [1]})"),
            "json_schema: 'required' must be an array of strings at /");
  EXPECT_EQ(error_of(R"({"enum": "red"})"), "json_schema: 'enum' must be a non-empty array at /");
  EXPECT_EQ(error_of(R"({"enum": []})"), "json_schema: 'enum' must be a non-empty array at /");
  EXPECT_EQ(error_of(R"({"type": "array", "items": 3})"), "json_schema: 'items' must be a boolean or a schema object at /");
  EXPECT_EQ(error_of(R"({"type": "array", "items": [{"type": "string"}]})"),
            "json_schema: 'items' must be a boolean or a schema object (the draft-4 array form is 'prefixItems' now) at /");
  EXPECT_EQ(error_of(R"({"type": "array", "prefixItems": {"type": "string"}})"),
            "json_schema: 'prefixItems' must be an array of schemas (objects or booleans) at /");
  EXPECT_EQ(error_of(R"({"type": "array", "prefixItems": ["a"]})"),
            "json_schema: 'prefixItems' must be an array of schemas (objects or booleans) at /");
  EXPECT_EQ(error_of(R"({"type": 5})"), "json_schema: 'type' must be a type name or a non-empty array of type names at /");
  EXPECT_EQ(error_of(R"({"type": []})"), "json_schema: 'type' must be a type name or a non-empty array of type names at /");
  EXPECT_EQ(error_of(R"({"type": ["string", 1]})"), "json_schema: 'type' must be a type name or a non-empty array of type names at /");
  EXPECT_EQ(error_of(R"({"enum": [1, 2], "type": 5})"),
            "json_schema: 'type' must be a type name or a non-empty array of type names at /");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"$ref": 1}})"), "json_schema: '$ref' must be a string at /items");
  for (const std::string k : {"anyOf", "oneOf", "allOf"}) {
    const std::string must = "json_schema: '" + k + "' must be a non-empty array of schemas (objects or booleans) at /";
    EXPECT_EQ(error_of(R"({")" + k + R"(": {"type": "string"}})"), must);
    EXPECT_EQ(error_of(R"({")" + k + R"(": []})"), must);  // allOf [] once gave any object
    EXPECT_EQ(error_of(R"({")" + k + R"(": [{"type": "string"}, 2]})"), must);
  }
  EXPECT_EQ(error_of(R"({"$defs": 5, "type": "integer"})"), "json_schema: '$defs' must be an object of schemas (objects or booleans) at /");
  EXPECT_EQ(error_of(R"({"definitions": {"N": 3}, "type": "integer"})"),
            "json_schema: 'definitions' must be an object of schemas (objects or booleans) at /");
  // Whichever type the schema has: keywords of another type are ignored, not their malformation.
  EXPECT_EQ(error_of(R"({"type": "string", "properties": [1]})"),
            "json_schema: 'properties' must be an object of schemas (objects or booleans) at /");
  EXPECT_EQ(error_of(R"({"type": "integer", "format": 5})"), "json_schema: 'format' must be a string at /");
  // allOf parts are merged rather than visited, and checked the same way.
  EXPECT_EQ(error_of(R"({"allOf": [{"properties": {"a": {}}}, {"properties": [1]}]})"),
            "json_schema: 'properties' must be an object of schemas (objects or booleans) at /allOf/1");
  EXPECT_EQ(error_of(R"({"allOf": [{"properties": {"a": {}}}, {"additionalProperties": "no"}]})"),
            "json_schema: 'additionalProperties' must be a boolean or a schema object at /allOf/1");
  EXPECT_EQ(error_of(R"({"allOf": [{"properties": {"a": {}}}, {"$ref": 1}]})"), "json_schema: '$ref' must be a string at /allOf/1");
  EXPECT_EQ(error_of(R"({"$defs": {"A": {"properties": {"a": {}}}}, "allOf": [{"$ref": "#/$defs/A", "required": ["b"]},
                         {"properties": {"b": {}}}]})"),
            "json_schema: '$ref' together with other constraints is not supported at /allOf/0");

  // Well-formed values compile and constrain as before; a boolean is a schema.
  schema props(R"({"type": "object", "properties": {"a": true, "b": {"type": "integer"}}, "required": ["a", "b"],
                   "additionalProperties": true})");
  EXPECT_TRUE(props.accepts(R"({"a": [1, "x"], "b": 2})"));
  EXPECT_FALSE(props.accepts(R"({"a": 1, "b": "2"})"));
  EXPECT_FALSE(props.accepts(R"({"b": 2})"));
  schema items(R"({"type": "array", "items": true, "prefixItems": [{"type": "string"}, true], "maxItems": 2})");
  EXPECT_TRUE(items.accepts(R"(["a", {"k": null}])"));
  EXPECT_FALSE(items.accepts(R"([1, 2])"));
  schema defs(R"({"$defs": {"Any": true, "N": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/N"}})");
  EXPECT_TRUE(defs.accepts("[1, 2]"));
  EXPECT_FALSE(defs.accepts(R"(["1"])"));
  schema c(R"({"const": {"k": [1, true]}})");
  EXPECT_TRUE(c.accepts(R"({"k": [1, true]})"));
  EXPECT_FALSE(c.accepts(R"({"k": [1]})"));
  schema merged(R"({"$defs": {"A": {"properties": {"a": {"type": "integer"}}, "required": ["a"]}},
                    "allOf": [{"$ref": "#/$defs/A", "description": "annotations beside a $ref are fine"},
                              {"properties": {"b": {"type": "string"}}}]})");
  EXPECT_TRUE(merged.accepts(R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(merged.accepts(R"({"b": "x"})"));
}

// Integer bounds were converted to int64_t unchecked: "minimum": 1e300 was undefined behaviour,
// and hi - lo could overflow near +-9.2e18. Beyond the 16 digits the grammar writes, a bound is
// as good as infinite: dropped on its own side, refused on the other.
TEST(JsonSchema, IntegerBoundsBeyondSixteenDigits) {
  const std::string none = "json_schema: integer bounds admit no integer of at most 16 digits (the most the grammar writes) at /";
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 1e300, "maximum": 1e300})"), none);
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 1e300})"), none);
  EXPECT_EQ(error_of(R"({"type": "integer", "exclusiveMaximum": -1e300})"), none);
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 9000000000000000000, "maximum": 9223372036854775807})"), none);
  EXPECT_EQ(error_of(R"({"type": "integer", "exclusiveMinimum": 9223372036854775807})"), none);
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 18446744073709551615})"), none);
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 1e300, "maximum": 5})"),
            "json_schema: integer range is empty (maximum below minimum) at /");
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": -9223372036854775808, "maximum": 5})").find("cannot be expressed"),
            std::string::npos);
  // Dropped: every integer the grammar writes meets the bound.
  for (const char* s : {R"({"type": "integer", "minimum": -1e300})", R"({"type": "integer", "minimum": -1e300, "maximum": 1e300})",
                        R"({"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807})",
                        R"({"type": "integer", "exclusiveMaximum": 18446744073709551615})"}) {
    schema any(s);
    EXPECT_TRUE(any.accepts("-42")) << s;
    EXPECT_TRUE(any.accepts("9999999999999999")) << s;
    EXPECT_TRUE(any.accepts("-9999999999999999")) << s;
  }
  schema nonneg(R"({"type": "integer", "minimum": 0, "maximum": 1e300})");
  EXPECT_TRUE(nonneg.accepts("9999999999999999"));
  EXPECT_FALSE(nonneg.accepts("-1"));
  // Inside 16 digits but above 2^53, an integer bound is exact (read as a double, it rounded).
  schema exact(R"({"type": "integer", "minimum": 9007199254740993, "exclusiveMaximum": 9007199254740996})");
  for (const char* in : {"9007199254740993", "9007199254740994", "9007199254740995"}) EXPECT_TRUE(exact.accepts(in)) << in;
  for (const char* out : {"9007199254740992", "9007199254740996"}) EXPECT_FALSE(exact.accepts(out)) << out;
  schema top(R"({"type": "integer", "minimum": 9999999999999998, "maximum": 9999999999999999})");
  EXPECT_TRUE(top.accepts("9999999999999999"));
  EXPECT_FALSE(top.accepts("9999999999999997"));
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByNameAndPointer) {
  auto e = error_of(R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'uniqueItems' at /properties/tags");
  e = error_of(R"({"patternProperties": {"^x": {}}})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'patternProperties' at /");
  e = error_of(R"({"type": "array", "items": {"not": {"type": "string"}}})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'not' at /items");
  e = error_of(R"({"anyOf": [{"if": {}}, {"type": "object", "properties": {"a": {"not": {}}}}]})");
  EXPECT_EQ(e, "json_schema: unsupported keyword 'if' at /anyOf/0");  // no branch left: the first refusal
  EXPECT_NE(error_of(R"({"type": "object", "required": ["x"], "properties": {}})").find("required property 'x'"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(error_of("false").find("accepts nothing"), std::string::npos);
}

TEST(JsonSchema, AnAnyOfBranchOutsideTheSubsetIsLeftOutWhenAnotherCompiles) {
  // pydantic's Decimal (some versions): a number, or a string whose pattern has a lookahead.
  const std::string decimal = R"({"anyOf": [{"type": "number"}, {"type": "string",
      "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}]})";
  schema d(decimal);
  EXPECT_TRUE(d.accepts("12.5"));
  EXPECT_FALSE(d.accepts(R"("12.5")"));  // the left-out branch is never generated
  schema opt(R"({"type": "object", "properties": {"p": )" + decimal +
             R"(, "q": {"oneOf": [{"type": "string", "format": "ipv4"}, {"type": "integer"}]}}, "required": ["p", "q"]})");
  EXPECT_TRUE(opt.accepts(R"({"p": 1, "q": 2})"));
  EXPECT_FALSE(opt.accepts(R"({"p": 1, "q": "1.2.3.4"})"));
  // A left-out branch's rules go with it: the same $ref compiled again later is whole.
  schema refs(R"({"$defs": {"S": {"type": "string", "pattern": "(?=a)a"}, "T": {"type": "boolean"}},
      "type": "array", "items": {"anyOf": [{"type": "object", "properties": {"t": {"$ref": "#/$defs/T"},
      "s": {"$ref": "#/$defs/S"}}, "required": ["t", "s"]}, {"$ref": "#/$defs/T"}]}})");
  EXPECT_TRUE(refs.accepts("[true, false]"));
  EXPECT_FALSE(refs.accepts(R"([{"t": true, "s": "a"}])"));
  // Only null left is refused (Optional[X] with X unsupported), and so is a malformed branch.
  EXPECT_EQ(error_of(R"({"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "null"}]})"),
            "json_schema: unsupported string format 'ipv4' (supported: date, time, date-time, uuid, email, uri) at /anyOf/0");
  EXPECT_EQ(error_of(R"({"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/Missing"}]})"),
            "json_schema: $ref '#/$defs/Missing' names nothing at /anyOf/1");
  // A false branch accepts nothing: leaving it out is exact.
  EXPECT_TRUE(schema(R"({"anyOf": [false, {"type": "boolean"}]})").accepts("true"));
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

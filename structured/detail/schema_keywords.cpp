#include "structured/detail/schema_keywords.hpp"

#include <cmath>
#include <map>

namespace troupe::structured::detail {

using simdjson::dom::element;
using simdjson::dom::element_type;

const std::set<std::string_view>& annotations() {
  static const std::set<std::string_view> s = {"description", "title",    "default",   "examples", "$schema",
                                               "$id",         "$comment", "deprecated", "readOnly", "writeOnly"};
  return s;
}
bool number_value(element e, double& v) {
  if (e.is_double()) v = e.get_double().value_unsafe();
  else if (e.is_int64()) v = static_cast<double>(e.get_int64().value_unsafe());
  else if (e.is_uint64()) v = static_cast<double>(e.get_uint64().value_unsafe());
  else return false;
  return true;
}

namespace {

bool is_anything(element) { return true; }
bool is_string(element e) { return e.type() == element_type::STRING; }
bool is_schema(element e) { return e.type() == element_type::OBJECT || e.type() == element_type::BOOL; }
bool is_number(element e) {
  double v = 0;
  return number_value(e, v);
}
bool is_count(element e) {
  double v = 0;
  return number_value(e, v) && v >= 0 && v == std::floor(v);
}
bool array_of(element e, bool (*member_ok)(element), bool nonempty) {
  if (e.type() != element_type::ARRAY) return false;
  const simdjson::dom::array a = e.get_array().value_unsafe();
  for (auto m : a)
    if (!member_ok(m)) return false;
  return !nonempty || a.size() > 0;
}
bool is_object_of_schemas(element e) {
  if (e.type() != element_type::OBJECT) return false;
  const simdjson::dom::object o = e.get_object().value_unsafe();
  for (auto f : o)
    if (!is_schema(f.value)) return false;
  return true;
}

// What a keyword's value must be. A draft-4 form (`older`, a value type) is refused with a note
// saying so.
struct value_kind {
  bool (*ok)(element);
  const char* what;
  element_type older = element_type::NULL_VALUE;
  const char* older_note = nullptr;
};

// The supported keywords and what each one's value must be.
const std::map<std::string_view, value_kind>& value_kinds() {
  const auto types = [](element e) { return is_string(e) || array_of(e, is_string, true); };
  const auto strings = [](element e) { return array_of(e, is_string, false); };
  const auto nonempty_array = [](element e) { return array_of(e, is_anything, true); };
  const auto schemas = [](element e) { return array_of(e, is_schema, false); };
  const auto nonempty_schemas = [](element e) { return array_of(e, is_schema, true); };
  static const value_kind bound{is_number, "a number", element_type::BOOL, "the draft-4 boolean form is not supported"};
  static const value_kind counted{is_count, "a non-negative integer"};
  static const value_kind text{is_string, "a string"};
  static const value_kind schema_map{is_object_of_schemas, "an object of schemas (objects or booleans)"};
  static const value_kind alternatives{nonempty_schemas, "a non-empty array of schemas (objects or booleans)"};
  static const std::map<std::string_view, value_kind> m = {
      {"const", {is_anything, "any value"}},
      {"type", {types, "a type name or a non-empty array of type names"}},
      {"properties", schema_map},
      {"required", {strings, "an array of strings"}},
      {"additionalProperties", {is_schema, "a boolean or a schema object"}},
      {"enum", {nonempty_array, "a non-empty array"}},
      {"items", {is_schema, "a boolean or a schema object", element_type::ARRAY, "the draft-4 array form is 'prefixItems' now"}},
      {"prefixItems", {schemas, "an array of schemas (objects or booleans)"}},
      {"anyOf", alternatives},
      {"oneOf", alternatives},
      {"allOf", alternatives},
      {"$ref", text},
      {"$defs", schema_map},
      {"definitions", schema_map},
      {"format", text},
      {"pattern", text},
      {"minimum", bound},
      {"maximum", bound},
      {"exclusiveMinimum", bound},
      {"exclusiveMaximum", bound},
      {"minItems", counted},
      {"maxItems", counted},
      {"minLength", counted},
      {"maxLength", counted},
      {"minProperties", counted},
      {"maxProperties", counted},
  };
  return m;
}

}  // namespace

bool is_schema_keyword(std::string_view k) { return value_kinds().count(k) > 0; }

std::string keyword_value_error(std::string_view k, element e) {
  auto it = value_kinds().find(k);
  if (it == value_kinds().end() || it->second.ok(e)) return {};
  const value_kind& v = it->second;
  const bool older = v.older_note && e.type() == v.older;
  return "'" + std::string(k) + "' must be " + v.what + (older ? " (" + std::string(v.older_note) + ")" : "");
}

}  // namespace troupe::structured::detail

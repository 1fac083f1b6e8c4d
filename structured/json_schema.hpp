#pragma once
// JSON Schema -> GBNF: the grammar of the JSON documents a schema accepts, in one fixed layout
// (json.dumps' default: `{"a": 1, "b": [1, 2]}`, one space after ':' and ','; no other
// whitespace). A 135M model given free whitespace will often emit it forever; one layout keeps
// every step productive and the tool-call grammars the lead composes predictable.
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties (in schema order; optional ones may be skipped), required, additionalProperties
// (false; true or absent: only the listed properties are generated, which the schema accepts; a
// schema: the only keys when there are no properties), enum, const, items, prefixItems,
// minItems/maxItems, anyOf/oneOf (oneOf as anyOf: exclusivity is not enforced; a branch outside
// this subset is left out when another, not only null, compiles), allOf (one
// schema, or object schemas merged), $ref to #/$defs, #/definitions or any local JSON pointer
// (recursion allowed), nested objects, string minLength/maxLength, string format (date, time,
// date-time, uuid, email, uri), pattern (regex.hpp; the whole string must match), integer
// minimum/maximum/exclusive* when the range holds at most 1000 values or is [0, inf) / [1, inf),
// number minimum 0 (no sign); an integer bound beyond 16 digits is no bound on its own side and
// admits nothing on the other. Other bounds are refused, never silently ignored, as is any
// keyword whose value is not of its kind, wherever it stands (a bound not a number, draft 4's
// boolean exclusive* and array items included, a count not a non-negative integer, a format not
// a string, properties not an object of schemas, ...: json_schema.cpp's value_kinds). description,
// title, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly are
// annotations and ignored on purpose. Any other keyword: an error naming it and its JSON pointer.
// Strings, numbers and nesting of schema-less values are bounded (numbers: 16 digits, any-JSON
// values: 8 levels deep), so the model cannot loop inside them.
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "structured/gbnf.hpp"  // gbnf_literal

namespace troupe::structured {

// The GBNF rules for `schema_json`, the document's rule named `root_rule` and every helper rule
// prefixed by root_rule + "-", so that several schemas compose into one grammar.
result<std::string> json_schema_to_gbnf(std::string_view schema_json, std::string_view root_rule = "root");

// `json_object`: any JSON object (8 levels deep at most), rules named as above.
std::string json_object_gbnf(std::string_view root_rule = "root");

}  // namespace troupe::structured

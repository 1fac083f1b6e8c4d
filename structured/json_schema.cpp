#include "structured/json_schema.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "structured/detail/json_dumps.hpp"
#include "structured/detail/schema_keywords.hpp"
#include "structured/regex.hpp"

namespace troupe::structured {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

constexpr int any_value_depth = 8;
constexpr int64_t max_enumerated_integers = 1000;
// The largest integer integer_rule writes (16 digits), and a clamp for integer bounds beyond it.
constexpr int64_t integer_written = 9'999'999'999'999'999;
constexpr int64_t integer_far = 100'000'000'000'000'000;

// A schema's `type`: one name or a list of names (checked to be so already); none when absent.
std::vector<std::string> type_names(const simdjson::dom::object& schema) {
  std::vector<std::string> types;
  element t;
  if (schema["type"].get(t)) return types;
  if (t.type() == element_type::STRING) {
    types.emplace_back(t.get_string().value_unsafe());
  } else {
    const simdjson::dom::array names = t.get_array().value_unsafe();
    for (auto x : names) types.emplace_back(x.get_string().value_unsafe());
  }
  return types;
}

// Whether a JSON value is of a JSON Schema type ("integer": a number without a fraction).
bool has_type(const element& v, std::string_view type) {
  switch (v.type()) {
    case element_type::STRING: return type == "string";
    case element_type::BOOL: return type == "boolean";
    case element_type::NULL_VALUE: return type == "null";
    case element_type::OBJECT: return type == "object";
    case element_type::ARRAY: return type == "array";
    case element_type::INT64:
    case element_type::UINT64: return type == "integer" || type == "number";
    case element_type::DOUBLE: {
      const double d = v.get_double().value_unsafe();
      return type == "number" || (type == "integer" && std::isfinite(d) && d == std::floor(d));
    }
    default: return false;
  }
}

std::string escape_pointer(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string sanitize(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '-';
  }
  if (out.size() > 40) out.resize(40);
  return out;
}

struct prop {
  std::string name;
  element schema;
  std::string pointer;
  bool required = false;
};

class generator {
 public:
  explicit generator(std::string root) : root_(std::move(root)) {}

  result<std::string> run(std::string_view text) {
    text_ = simdjson::padded_string(text);
    if (auto e = parser_.parse(text_).get(doc_); e)
      return make_error(std::string("json_schema: not valid JSON: ") + simdjson::error_message(e));
    std::string body;
    if (auto st = visit(doc_, "", root_, body); !st) return make_error(st.error());
    return emit(body);
  }

  std::string any_object() {
    need_any(0);
    return emit(any_object_rule(0));
  }

 private:
  std::string root_;
  simdjson::padded_string text_;
  simdjson::dom::parser parser_;
  element doc_;
  std::vector<std::pair<std::string, std::string>> rules_;  // helpers, in creation order
  std::set<std::string> names_;
  std::map<std::string, std::string> refs_;  // pointer -> rule
  bool malformed_ = false;  // a refusal is the schema's error, not a limit of this compiler

  std::string emit(const std::string& root_body) const {
    std::string out = root_ + " ::= " + root_body + "\n";
    for (const auto& [n, b] : rules_) out += n + " ::= " + b + "\n";
    return out;
  }

  status malformed(status st) {
    malformed_ = true;
    return st;
  }
  static std::string where(const std::string& ptr) { return ptr.empty() ? "/" : ptr; }
  static status fail(const std::string& what, const std::string& ptr) {
    return make_error("json_schema: " + what + " at " + where(ptr));
  }

  std::string fresh(const std::string& hint) {
    std::string base = root_ + "-" + hint;
    std::string name = base;
    for (int i = 2; names_.count(name) || name == root_; ++i) name = base + std::to_string(i);
    names_.insert(name);
    return name;
  }
  // A rule with a fixed name made once (the shared building blocks).
  std::string common(const std::string& hint, const std::string& body) {
    const std::string name = root_ + "-" + hint;
    if (!names_.count(name)) {
      names_.insert(name);
      rules_.emplace_back(name, body);
    }
    return name;
  }
  std::string add(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  // A rule for the strings texts[from, to) (sorted, sharing their first `depth` characters):
  // "ends here" if one of them is exactly that prefix, else a next character and its own rule.
  std::string digit_trie(const std::string& hint, const std::vector<std::string>& texts, size_t from, size_t to,
                         size_t depth) {
    std::string alts;
    bool ends = false;
    for (size_t i = from; i < to;) {
      if (texts[i].size() == depth) {
        ends = true;
        ++i;
        continue;
      }
      const char c = texts[i][depth];
      size_t j = i;
      while (j < to && texts[j].size() > depth && texts[j][depth] == c) ++j;
      const bool leaf = j - i == 1 && texts[i].size() == depth + 1;
      const std::string next = leaf ? std::string() : " " + digit_trie(hint, texts, i, j, depth + 1);
      alts += (alts.empty() ? "" : " | ") + gbnf_literal(std::string(1, c)) + next;
      i = j;
    }
    if (ends) alts = alts.empty() ? "\"\"" : "(" + alts + ")?";
    return add(hint, alts);
  }

  std::string str_char() {
    return common("char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})");
  }
  std::string string_rule() { return common("string", "\"\\\"\" " + str_char() + "* \"\\\"\""); }
  std::string integer_rule() { return common("integer", "\"-\"? (\"0\" | [1-9] [0-9]{0,15})"); }
  std::string number_rule() {
    return common("number", "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?");
  }
  std::string boolean_rule() { return common("boolean", "\"true\" | \"false\""); }

  // value-d: any JSON value at nesting depth d (scalars only at the deepest level).
  std::string any_object_rule(int d) { return root_ + "-object-d" + std::to_string(d); }
  std::string any_value_rule(int d) {
    need_any(d);
    return root_ + "-value-d" + std::to_string(d);
  }
  void need_any(int d) {
    for (int k = any_value_depth; k >= d; --k) {
      const std::string v = root_ + "-value-d" + std::to_string(k);
      if (names_.count(v)) continue;
      names_.insert(v);
      std::string scalars = string_rule() + " | " + number_rule() + " | " + boolean_rule() + " | \"null\"";
      if (k == any_value_depth) {
        rules_.emplace_back(v, scalars);
        continue;
      }
      const std::string next = root_ + "-value-d" + std::to_string(k + 1);
      const std::string obj = any_object_rule(k), arr = root_ + "-array-d" + std::to_string(k);
      names_.insert(obj);
      names_.insert(arr);
      const std::string kv = string_rule() + " \": \" " + next;
      rules_.emplace_back(obj, "\"{\" (" + kv + " (\", \" " + kv + ")*)? \"}\"");
      rules_.emplace_back(arr, "\"[\" (" + next + " (\", \" " + next + ")*)? \"]\"");
      rules_.emplace_back(v, obj + " | " + arr + " | " + scalars);
    }
  }

  status resolve(const std::string& ref, const std::string& ptr, element& out) {
    if (ref.empty() || ref[0] != '#') return fail("only local $ref (\"#/...\") is supported, got '" + ref + "'", ptr);
    element cur = doc_;
    size_t p = 1;
    while (p < ref.size()) {
      if (ref[p] != '/') return fail("malformed $ref '" + ref + "'", ptr);
      size_t q = ref.find('/', p + 1);
      if (q == std::string::npos) q = ref.size();
      std::string key;
      for (size_t i = p + 1; i < q; ++i) {
        if (ref[i] == '~' && i + 1 < q) {
          key += ref[i + 1] == '1' ? '/' : '~';
          ++i;
        } else {
          key += ref[i];
        }
      }
      element next;
      if (cur.type() == element_type::OBJECT) {
        if (cur.get_object().value_unsafe().at_key(key).get(next)) return fail("$ref '" + ref + "' names nothing", ptr);
      } else if (cur.type() == element_type::ARRAY) {
        size_t idx = 0;
        try {
          idx = std::stoul(key);
        } catch (...) {
          return fail("$ref '" + ref + "' names nothing", ptr);
        }
        if (cur.get_array().value_unsafe().at(idx).get(next)) return fail("$ref '" + ref + "' names nothing", ptr);
      } else {
        return fail("$ref '" + ref + "' names nothing", ptr);
      }
      cur = next;
      p = q;
    }
    out = cur;
    return {};
  }

  // The GBNF expression for `s` (found at JSON pointer `ptr`) into `out`.
  status visit(element s, const std::string& ptr, const std::string& hint, std::string& out) {
    if (s.type() == element_type::BOOL) {
      if (s.get_bool().value_unsafe()) {
        out = any_value_rule(0);
        return {};
      }
      return fail("schema 'false' accepts nothing", ptr);
    }
    if (s.type() != element_type::OBJECT) return malformed(fail("a schema must be an object or a boolean", ptr));
    auto obj = s.get_object().value_unsafe();
    std::set<std::string_view> keys;
    for (auto f : obj) {
      if (!detail::is_schema_keyword(f.key) && !detail::annotations().count(f.key))
        return fail("unsupported keyword '" + std::string(f.key) + "'", ptr);
      if (auto st = check_value(f.key, f.value, ptr); !st) return malformed(st);
      if (!detail::annotations().count(f.key) && f.key != "$defs" && f.key != "definitions") keys.insert(f.key);
    }
    auto has = [&](std::string_view k) { return keys.count(k) > 0; };
    auto only = [&](std::string_view k) { return keys.size() == 1 && has(k); };

    if (has("$ref")) {
      if (!only("$ref")) return fail("'$ref' together with other constraints is not supported", ptr);
      const std::string r(obj["$ref"].get_string().value_unsafe());
      auto it = refs_.find(r);
      if (it != refs_.end()) {
        out = it->second;
        return {};
      }
      element target;
      if (auto st = resolve(r, ptr, target); !st) return malformed(st);
      // "def-": a definition named like a shared rule ("string") must not take its name.
      const std::string name = fresh("def-" + sanitize(r.substr(r.rfind('/') + 1)));
      refs_[r] = name;
      const size_t slot = rules_.size();
      rules_.emplace_back(name, "");
      std::string body;
      if (auto st = visit(target, r.substr(1), name.substr(root_.size() + 1), body); !st) return st;
      rules_[slot].second = body;
      out = name;
      return {};
    }
    if (has("const")) {
      if (!only("const")) return fail("'const' together with other constraints is not supported", ptr);
      out = gbnf_literal(detail::json_dumps(obj["const"].value_unsafe()));
      return {};
    }
    if (has("enum")) {
      // `type` next to enum: a value must have it too (JSON Schema: both hold), so the others are
      // left out; none left is a schema nothing satisfies, refused.
      for (auto k : keys)
        if (k != "enum" && k != "type") return fail("'enum' together with '" + std::string(k) + "' is not supported", ptr);
      const std::vector<std::string> types = type_names(obj);
      const simdjson::dom::array values = obj["enum"].get_array().value_unsafe();
      std::string alts;
      for (auto v : values)
        if (types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& n) { return has_type(v, n); }))
          alts += (alts.empty() ? "" : " | ") + gbnf_literal(detail::json_dumps(v));
      if (alts.empty()) {
        std::string names;
        for (const auto& n : types) names += (names.empty() ? "'" : " or '") + n + "'";
        return fail("'enum' has no value of type " + names + ": nothing satisfies this schema", ptr);
      }
      out = add(hint, alts);
      return {};
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!has(k)) continue;
      if (!only(k)) return fail("'" + std::string(k) + "' together with other constraints is not supported", ptr);
      // A branch outside the supported subset (pydantic's Decimal: a number, or a string with a
      // lookahead pattern) is left out, its rules rolled back, when another branch compiles:
      // what the rest generates the schema still accepts. Not when only null would be left (a
      // field that is always null is not what Optional[X] meant), nor for a malformed branch.
      const simdjson::dom::array subs = obj[k].get_array().value_unsafe();
      std::string alts;
      std::optional<status> first_refusal;
      size_t i = 0;
      for (auto sub : subs) {
        auto saved = std::make_tuple(rules_, names_, refs_);
        std::string e;
        const std::string at = std::to_string(i++);
        if (auto st = visit(sub, ptr + "/" + k + "/" + at, hint + "-" + at, e); st) {
          alts += (alts.empty() ? "" : " | ") + e;
        } else {
          if (malformed_) return st;
          std::tie(rules_, names_, refs_) = std::move(saved);
          if (!first_refusal) first_refusal = st;
        }
      }
      if (first_refusal && (alts.empty() || alts == "\"null\"")) return *first_refusal;
      out = add(hint, alts);
      return {};
    }
    if (has("allOf")) return visit_all_of(s, obj, keys, ptr, hint, out);

    // type: one name, a list of names, or inferred from the keywords present. (Keyword values
    // are of their kind from here on: the loop above refused any other.)
    std::vector<std::string> types = type_names(obj);
    if (types.empty()) {
      if (has("properties") || has("additionalProperties") || has("required")) {
        types = {"object"};
      } else if (has("items") || has("prefixItems") || has("minItems") || has("maxItems")) {
        types = {"array"};
      } else if (has("minLength") || has("maxLength") || has("format") || has("pattern")) {
        types = {"string"};
      } else if (has("minimum") || has("maximum") || has("exclusiveMinimum") || has("exclusiveMaximum")) {
        types = {"number"};
      } else {
        out = any_value_rule(0);
        return {};
      }
    }
    std::string alts;
    for (const auto& ty : types) {
      std::string e;
      if (auto st = visit_typed(obj, keys, ty, ptr, types.size() > 1 ? hint + "-" + ty : hint, e); !st) return st;
      alts += (alts.empty() ? "" : " | ") + e;
    }
    out = types.size() == 1 ? alts : add(hint, alts);
    return {};
  }

  status visit_all_of(element self, simdjson::dom::object obj, const std::set<std::string_view>& keys, const std::string& ptr,
                      const std::string& hint, std::string& out) {
    const simdjson::dom::array subs = obj["allOf"].get_array().value_unsafe();
    if (subs.size() == 1 && keys.size() == 1) return visit(subs.at(0).value_unsafe(), ptr + "/allOf/0", hint, out);
    // Object schemas merge: the properties of all, required by any, closed if any is closed.
    std::vector<prop> props;
    std::vector<std::string> pending;  // required names, matched once every part's properties are in
    bool closed = false;
    // The schema's own keywords beside allOf count as one more part.
    const bool own = keys.size() > 1;
    std::vector<std::pair<element, std::string>> parts;
    if (own) parts.emplace_back(self, ptr);
    size_t i = 0;
    for (auto sub : subs) parts.emplace_back(sub, ptr + "/allOf/" + std::to_string(i++));
    for (size_t pi = 0; pi < parts.size(); ++pi) {
      element sch = parts[pi].first;
      std::string at = parts[pi].second;
      // Follow $refs to the object schema they name. (A part is not visited, so its keyword
      // values are checked here; a $ref's siblings would be dropped, so they are refused as
      // visit refuses them.)
      for (int hops = 0; hops < 16 && sch.type() == element_type::OBJECT; ++hops) {
        const simdjson::dom::object o = sch.get_object().value_unsafe();
        std::string_view ref;
        if (o["$ref"].get(ref)) break;  // none, or not a string (refused below)
        for (auto f : o)
          if (f.key != "$ref" && !detail::annotations().count(f.key) && f.key != "$defs" && f.key != "definitions")
            return fail("'$ref' together with other constraints is not supported", at);
        element target;
        if (auto st = resolve(std::string(ref), at, target); !st) return st;
        sch = target;
        at = std::string(ref.substr(1));
      }
      if (sch.type() != element_type::OBJECT) return fail("'allOf' of non-object schemas is not supported", at);
      auto o = sch.get_object().value_unsafe();
      for (auto f : o) {
        const std::string_view k = f.key;
        if (k == "allOf" && own && pi == 0) continue;
        if (auto st = check_value(k, f.value, at); !st) return st;
        if (detail::annotations().count(k) || k == "$defs" || k == "definitions" || k == "properties" || k == "required" ||
            k == "additionalProperties")
          continue;
        if (k == "type" && f.value.is_string() && f.value.get_string().value_unsafe() == "object") continue;
        if (k == "allOf") return fail("nested 'allOf' is not supported", at);
        return fail("'allOf' is only supported over object schemas (found '" + std::string(k) + "')", at);
      }
      if (auto st = collect_props(o, at, props, closed, &pending); !st) return st;
    }
    for (const auto& n : pending) {
      auto it = std::find_if(props.begin(), props.end(), [&](const prop& p) { return p.name == n; });
      if (it == props.end()) return fail("required property '" + n + "' is in no part's 'properties'", ptr);
      it->required = true;
    }
    return object_rule(props, closed, nullptr, ptr, hint, out);
  }

  status collect_props(simdjson::dom::object o, const std::string& ptr, std::vector<prop>& props, bool& closed,
                       std::vector<std::string>* pending = nullptr) {
    // The values are of their kind (checked by visit, or visit_all_of for a part): absent is
    // the only failed read.
    element ap;
    if (!o["additionalProperties"].get(ap) && ap.type() == element_type::BOOL && !ap.get_bool().value_unsafe()) closed = true;
    simdjson::dom::object ps;
    if (!o["properties"].get_object().get(ps)) {
      for (auto f : ps) {
        const std::string name(f.key);
        auto it = std::find_if(props.begin(), props.end(), [&](const prop& p) { return p.name == name; });
        if (it != props.end()) return fail("property '" + name + "' is defined twice across 'allOf'", ptr);
        props.push_back({name, f.value, ptr + "/properties/" + escape_pointer(name), false});
      }
    }
    simdjson::dom::array req;
    if (!o["required"].get_array().get(req)) {
      for (auto r : req) {
        const std::string_view n = r.get_string().value_unsafe();
        if (pending) {
          pending->emplace_back(n);
          continue;
        }
        auto it = std::find_if(props.begin(), props.end(), [&](const prop& p) { return p.name == n; });
        if (it == props.end()) return fail("required property '" + std::string(n) + "' is not in 'properties'", ptr);
        it->required = true;
      }
    }
    return {};
  }

  // An object of `props` in order (optional ones may be skipped), or with no props and `extra`,
  // any number of keys with values of that schema.
  status object_rule(const std::vector<prop>& props, bool closed, const element* extra, const std::string& ptr,
                     const std::string& hint, std::string& out, int min_keys = 0, int max_keys = -1) {
    (void)closed;  // open or closed, only the listed properties are generated (both accept that)
    if (props.empty()) {
      if (extra) {
        std::string v;
        if (auto st = visit(*extra, ptr + "/additionalProperties", hint + "-value", v); !st) return st;
        const std::string kv = string_rule() + " \": \" " + v;
        auto rep = [](int lo, int hi) {
          return hi < 0 ? (lo == 0 ? std::string("*") : "{" + std::to_string(lo) + ",}")
                        : "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
        };
        if (max_keys == 0) out = "\"{}\"";
        else if (min_keys == 0) out = add(hint, "\"{\" (" + kv + " (\", \" " + kv + ")" + rep(0, max_keys < 0 ? -1 : max_keys - 1) + ")? \"}\"");
        else out = add(hint, "\"{\" " + kv + " (\", \" " + kv + ")" + rep(min_keys - 1, max_keys < 0 ? -1 : max_keys - 1) + " \"}\"");
        return {};
      }
      out = closed ? std::string("\"{}\"") : (need_any(0), any_object_rule(0));
      return {};
    }
    std::vector<std::string> kv(props.size());
    for (size_t i = 0; i < props.size(); ++i) {
      std::string v;
      if (auto st = visit(props[i].schema, props[i].pointer, hint + "-" + sanitize(props[i].name), v); !st) return st;
      kv[i] = gbnf_literal("\"" + json_key(props[i].name) + "\": ") + " " + v;
    }
    // s_i: properties i.. with none written yet; t_i: the same after one (a comma first).
    const size_t n = props.size();
    std::vector<std::string> s(n + 1), t(n + 1);
    const std::string name = fresh(hint);
    rules_.emplace_back(name, "");
    const size_t slot = rules_.size() - 1;
    // Built from the end: the rules for later suffixes exist before the earlier ones use them.
    std::vector<std::pair<std::string, std::string>> made;
    for (size_t k = n; k-- > 0;) {
      const std::string sn = name + "-s" + std::to_string(k), tn = name + "-t" + std::to_string(k);
      const std::string s_next = k + 1 < n ? s[k + 1] : "", t_next = k + 1 < n ? t[k + 1] : "";
      std::string sb = kv[k] + (t_next.empty() ? "" : " " + t_next);
      std::string tb = "\", \" " + kv[k] + (t_next.empty() ? "" : " " + t_next);
      // An optional property may be skipped. (An empty alternative is written as `( )?`: a
      // line ending in `|` would continue on the next line.)
      if (!props[k].required) {
        sb = s_next.empty() ? "(" + sb + ")?" : sb + " | " + s_next;
        tb = t_next.empty() ? "(" + tb + ")?" : tb + " | " + t_next;
      }
      names_.insert(sn);
      names_.insert(tn);
      made.emplace_back(sn, sb);
      made.emplace_back(tn, tb);
      s[k] = sn;
      t[k] = tn;
    }
    rules_[slot].second = "\"{\" " + s[0] + " \"}\"";
    for (auto it = made.rbegin(); it != made.rend(); ++it) rules_.push_back(*it);
    out = name;
    return {};
  }

  static std::string json_key(const std::string& k) {
    std::string out;
    for (char c : k) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  }

  static status check_value(std::string_view k, element e, const std::string& ptr) {
    const std::string wrong = detail::keyword_value_error(k, e);
    return wrong.empty() ? status{} : fail(wrong, ptr);
  }

  // Whether bound `k` is present, and its value (check_value has refused one of the wrong kind).
  static bool number_of(simdjson::dom::object o, const char* k, double& v) {
    element e;
    return !o[k].get(e) && detail::number_value(e, v);
  }

  status visit_typed(simdjson::dom::object obj, const std::set<std::string_view>& keys, const std::string& ty,
                     const std::string& ptr, const std::string& hint, std::string& out) {
    // Keywords that apply to another type are ignored for this one, as JSON Schema does.
    if (ty == "null") {
      out = "\"null\"";
    } else if (ty == "boolean") {
      out = boolean_rule();
    } else if (ty == "string") {
      return string_typed(obj, keys, ptr, hint, out);
    } else if (ty == "integer") {
      return integer_typed(obj, ptr, hint, out);
    } else if (ty == "number") {
      double lo = 0, hi = 0;
      const bool has_lo = number_of(obj, "minimum", lo), has_hi = number_of(obj, "maximum", hi);
      double xlo = 0, xhi = 0;
      if (number_of(obj, "exclusiveMinimum", xlo) || number_of(obj, "exclusiveMaximum", xhi) || has_hi)
        return fail("number bounds other than 'minimum': 0 cannot be expressed by the grammar (use type integer with a small range)", ptr);
      if (has_lo && lo != 0)
        return fail("number 'minimum' other than 0 cannot be expressed by the grammar", ptr);
      out = has_lo ? common("number-nonneg", "(\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?")
                   : number_rule();
    } else if (ty == "object") {
      std::vector<prop> props;
      bool closed = false;
      if (auto st = collect_props(obj, ptr, props, closed); !st) return st;
      element ap;
      const bool extra_schema = !obj["additionalProperties"].get(ap) && ap.type() == element_type::OBJECT;
      double dmin = 0, dmax = -1;
      const bool has_min = number_of(obj, "minProperties", dmin), has_max = number_of(obj, "maxProperties", dmax);
      if (has_min || has_max) {
        // Counted only where every key comes from additionalProperties (a map).
        if (!props.empty() || !extra_schema)
          return fail("minProperties/maxProperties are only supported on a map (additionalProperties with a schema and no properties)", ptr);
        if (dmin > 1000 || dmax > 1000 || (has_max && dmax < dmin)) return fail("minProperties/maxProperties out of range", ptr);
      }
      return object_rule(props, closed, extra_schema ? &ap : nullptr, ptr, hint, out, static_cast<int>(dmin),
                         has_max ? static_cast<int>(dmax) : -1);
    } else if (ty == "array") {
      return array_typed(obj, ptr, hint, out);
    } else {
      return fail("unknown type '" + ty + "'", ptr);
    }
    return {};
  }

  status string_typed(simdjson::dom::object obj, const std::set<std::string_view>& keys, const std::string& ptr,
                      const std::string& hint, std::string& out) {
    std::string_view fmt, pat;  // absent, or strings (visit refused any other)
    const bool has_fmt = !obj["format"].get_string().get(fmt);
    const bool has_pat = !obj["pattern"].get_string().get(pat);
    const bool has_len = keys.count("minLength") || keys.count("maxLength");
    static const std::set<std::string_view> served_formats = {"date", "time", "date-time", "uuid", "email", "uri"};
    // An unknown format first: it is the problem, not a combination with other keywords.
    if (has_fmt && !served_formats.count(fmt))
      return fail("unsupported string format '" + std::string(fmt) + "' (supported: date, time, date-time, uuid, email, uri)", ptr);
    // uri takes length bounds (pydantic's AnyUrl and HttpUrl: minLength 1, maxLength 2083).
    if ((has_fmt && has_pat) || (((has_fmt && fmt != "uri") || has_pat) && has_len))
      return fail("only one of format, pattern and minLength/maxLength may constrain a string (format 'uri' takes "
                  "lengths)", ptr);
    if (has_fmt && fmt == "uri") return uri_typed(obj, keys, ptr, out);
    if (has_fmt) {
      static const std::string label = "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?";
      static const std::map<std::string_view, std::string> formats = {
          // Years 0001-9999: RFC 3339 allows 0000, which Python's date (pydantic) and most date
          // libraries refuse, and no client asks for it.
          {"date", "([1-9] [0-9]{3} | \"0\" ([1-9] [0-9]{2} | \"0\" ([1-9] [0-9] | \"0\" [1-9]))) \"-\" "
                   "(\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"},
          {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
          {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}"},
          // RFC 5321: a domain of two to four labels, each 1-63 letters, digits and hyphens that
          // starts and ends with a letter or digit (it admitted "x@-.-" before).
          {"email", "[a-zA-Z0-9._%+-]{1,64} \"@\" " + label + " (\".\" " + label + "){1,3}"},
      };
      std::string body;
      if (fmt == "date-time") {
        body = formats.at("date") + " \"T\" " + formats.at("time");
      } else {
        body = formats.at(fmt);  // served_formats held it
      }
      out = common("format-" + sanitize(fmt), "\"\\\"\" " + body + " \"\\\"\"");
      return {};
    }
    if (has_pat) {
      auto g = regex_to_gbnf(pat, true);
      if (!g) return fail("'pattern': " + g.error(), ptr);
      out = add(hint, "\"\\\"\" " + g.value() + " \"\\\"\"");
      return {};
    }
    if (has_len) {
      double lo = 0, hi = -1;
      number_of(obj, "minLength", lo);
      number_of(obj, "maxLength", hi);
      if (keys.count("maxLength") && hi < lo) return fail("maxLength below minLength", ptr);
      if (lo > 1000 || hi > 1000) return fail("string lengths above 1000 are not supported", ptr);
      const std::string rep = keys.count("maxLength") ? "{" + std::to_string(static_cast<int>(lo)) + "," + std::to_string(static_cast<int>(hi)) + "}"
                                                       : "{" + std::to_string(static_cast<int>(lo)) + ",}";
      out = add(hint, "\"\\\"\" (" + str_char() + ")" + rep + " \"\\\"\"");
      return {};
    }
    out = string_rule();
    return {};
  }

  // RFC 3986's shape, no escapes in the JSON string: a scheme of 1-16 characters, ':', then
  // 1 or more of the characters a URI may hold (unreserved, reserved and '%'). Lengths bound the
  // whole text, the scheme counted at its longest (maxLength) or shortest (minLength): what is
  // written always keeps them, some longer schemes are just never written. Past 1000 characters
  // the rest is capped at 1000 (a stricter bound, as string lengths above 1000 are not served).
  status uri_typed(simdjson::dom::object obj, const std::set<std::string_view>& keys, const std::string& ptr,
                   std::string& out) {
    double lo = 0, hi = -1;
    number_of(obj, "minLength", lo);
    number_of(obj, "maxLength", hi);
    constexpr int scheme_max = 16;
    if (keys.count("maxLength") && hi < lo) return fail("maxLength below minLength", ptr);
    if (keys.count("maxLength") && hi < scheme_max + 2)
      return fail("format 'uri' with a maxLength below " + std::to_string(scheme_max + 2) + " is not supported", ptr);
    if (lo > 1000) return fail("string lengths above 1000 are not supported", ptr);
    const int rest_min = std::max(1, static_cast<int>(lo) - 2);
    const int rest_max = keys.count("maxLength") ? std::min(1000, static_cast<int>(hi) - scheme_max - 1) : 1000;
    if (rest_min > rest_max) return fail("format 'uri': minLength and maxLength leave no room", ptr);
    const std::string body = "[a-zA-Z] [a-zA-Z0-9+.-]{0," + std::to_string(scheme_max - 1) + "} \":\" "
                             "[a-zA-Z0-9._~:/?#@!$&'()*+,;=%\\[\\]-]{" + std::to_string(rest_min) + "," +
                             std::to_string(rest_max) + "}";
    out = common("format-uri-" + std::to_string(rest_min) + "-" + std::to_string(rest_max),
                 "\"\\\"\" " + body + " \"\\\"\"");
    return {};
  }

  // The least (`lower`) or greatest integer that bound `k` admits, if present, clamped to
  // +-integer_far. An int64 is read as one: as a double, 2^53 + 1 would round to 2^53.
  static bool integer_bound(simdjson::dom::object o, const char* k, bool lower, bool exclusive, int64_t& out) {
    element e;
    if (o[k].get(e)) return false;
    int64_t x = 0;
    if (e.is_int64()) {
      x = std::clamp<int64_t>(e.get_int64().value_unsafe(), -integer_far, integer_far);
    } else if (e.is_uint64()) {
      x = integer_far;  // above INT64_MAX
    } else {
      const double v = std::clamp(e.get_double().value_unsafe(), -static_cast<double>(integer_far), static_cast<double>(integer_far));
      x = static_cast<int64_t>(lower != exclusive ? std::ceil(v) : std::floor(v));
    }
    if (exclusive) x += lower ? 1 : -1;
    out = std::clamp(x, -integer_far, integer_far);
    return true;
  }

  status integer_typed(simdjson::dom::object obj, const std::string& ptr, const std::string& hint, std::string& out) {
    // integer_rule writes at most 16 digits, so a bound beyond them is as good as infinite: a
    // minimum below -integer_written (a maximum above +integer_written) holds for every integer
    // the grammar can write and is dropped, and one on the far side holds for none, so it is
    // refused. Bounds are read clamped to +-integer_far (beyond the 16 digits, and far inside
    // int64), so no conversion leaves int64 and no `hi - lo` overflows.
    int64_t lo = -integer_far, hi = integer_far, x = 0;
    if (integer_bound(obj, "minimum", true, false, x)) lo = std::max(lo, x);
    if (integer_bound(obj, "exclusiveMinimum", true, true, x)) lo = std::max(lo, x);
    if (integer_bound(obj, "maximum", false, false, x)) hi = std::min(hi, x);
    if (integer_bound(obj, "exclusiveMaximum", false, true, x)) hi = std::min(hi, x);
    if (hi < lo) return fail("integer range is empty (maximum below minimum)", ptr);
    if (lo > integer_written || hi < -integer_written)
      return fail("integer bounds admit no integer of at most 16 digits (the most the grammar writes)", ptr);
    const bool has_lo = lo >= -integer_written, has_hi = hi <= integer_written;
    if (!has_lo && !has_hi) {
      out = integer_rule();
      return {};
    }
    if (has_lo && has_hi) {
      if (hi - lo >= max_enumerated_integers)
        return fail("integer range wider than " + std::to_string(max_enumerated_integers) + " values is not supported", ptr);
      // The numbers as a trie of their digits, one rule per shared prefix: a matcher state then
      // holds a stack per possible next digit, not one per number of the range (a flat list of
      // 100 literals made every state inside the number 100 stacks deep in alternatives, and each
      // token mask a walk over all of them).
      std::vector<std::string> texts;
      for (int64_t n = lo; n <= hi; ++n) texts.push_back(std::to_string(n));
      std::sort(texts.begin(), texts.end());
      out = digit_trie(hint, texts, 0, texts.size(), 0);
      return {};
    }
    if (has_lo && !has_hi && (lo == 0 || lo == 1)) {
      out = lo == 0 ? common("integer-nonneg", "\"0\" | [1-9] [0-9]{0,15}") : common("integer-pos", "[1-9] [0-9]{0,15}");
      return {};
    }
    return fail("integer bounds other than a range of at most " + std::to_string(max_enumerated_integers) +
                    " values or minimum 0/1 cannot be expressed by the grammar",
                ptr);
  }

  status array_typed(simdjson::dom::object obj, const std::string& ptr, const std::string& hint, std::string& out) {
    double dmin = 0, dmax = -1;
    number_of(obj, "minItems", dmin);
    const bool has_max = number_of(obj, "maxItems", dmax);
    if (dmin > 1000 || dmax > 1000) return fail("minItems/maxItems above 1000 are not supported", ptr);
    if (has_max && dmax < dmin) return fail("maxItems below minItems", ptr);
    const int min_items = static_cast<int>(dmin), max_items = has_max ? static_cast<int>(dmax) : -1;
    std::vector<std::string> prefix;
    simdjson::dom::array pre;
    if (!obj["prefixItems"].get_array().get(pre)) {  // absent, or an array (visit refused any other)
      size_t i = 0;
      for (auto sub : pre) {
        std::string e;
        if (auto st = visit(sub, ptr + "/prefixItems/" + std::to_string(i), hint + "-" + std::to_string(i), e); !st) return st;
        prefix.push_back(e);
        ++i;
      }
    }
    if (max_items >= 0 && static_cast<int>(prefix.size()) > max_items)
      return fail("more prefixItems than maxItems allows", ptr);
    // The items after the prefix.
    std::string item;
    element it;
    const bool has_items = !obj["items"].get(it);
    if (has_items && it.type() == element_type::BOOL && !it.get_bool().value_unsafe()) {
      item.clear();  // no more items
    } else if (has_items) {
      if (auto st = visit(it, ptr + "/items", hint + "-item", item); !st) return st;
    } else if (prefix.empty() || min_items > static_cast<int>(prefix.size())) {
      item = any_value_rule(1);
    }
    const int n_pre = static_cast<int>(prefix.size());
    const int more_min = std::max(0, min_items - n_pre);
    const int more_max = max_items < 0 ? -1 : max_items - n_pre;
    if (item.empty() && more_min > 0) return fail("minItems needs more items than prefixItems gives and 'items' is false", ptr);
    std::string body = "\"[\"";
    for (int i = 0; i < n_pre; ++i) body += (i ? " \", \" " : " ") + prefix[static_cast<size_t>(i)];
    if (!item.empty() && more_max != 0) {
      const std::string sep_item = "\", \" " + item;
      auto rep = [](int lo, int hi) {
        return hi < 0 ? (lo == 0 ? std::string("*") : "{" + std::to_string(lo) + ",}")
                      : "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
      };
      if (n_pre > 0) {
        body += " (" + sep_item + ")" + rep(more_min, more_max);
      } else if (more_min == 0) {
        body += " (" + item + " (" + sep_item + ")" + rep(0, more_max < 0 ? -1 : more_max - 1) + ")?";
      } else {
        body += " " + item + " (" + sep_item + ")" + rep(more_min - 1, more_max < 0 ? -1 : more_max - 1);
      }
    }
    body += " \"]\"";
    out = add(hint, body);
    return {};
  }
};

}  // namespace

result<std::string> json_schema_to_gbnf(std::string_view schema_json, std::string_view root_rule) {
  return generator(std::string(root_rule)).run(schema_json);
}

std::string json_object_gbnf(std::string_view root_rule) { return generator(std::string(root_rule)).any_object(); }

}  // namespace troupe::structured

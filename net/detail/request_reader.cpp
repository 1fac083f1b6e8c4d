#include "net/detail/request_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "net/detail/number_locator.hpp"

namespace troupe::net::detail {

namespace dom = simdjson::dom;

namespace {

thread_local dom::parser tl_parser;

const char* type_name(dom::element_type t) {
  switch (t) {
    case dom::element_type::ARRAY: return "an array";
    case dom::element_type::OBJECT: return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
    case dom::element_type::DOUBLE: return "a number";
    case dom::element_type::STRING: return "a string";
    case dom::element_type::BOOL: return "a boolean";
    case dom::element_type::NULL_VALUE: return "null";
  }
  return "something else";
}

bool number_error(simdjson::error_code ec) {
  return ec == simdjson::NUMBER_ERROR || ec == simdjson::NUMBER_OUT_OF_RANGE;
}

std::string describe_parse_error(simdjson::error_code ec) {
  if (number_error(ec)) return "a number in the body is malformed or out of range (integers must fit in 64 bits)";
  return std::string("the body is not valid JSON (") + simdjson::error_message(ec) + ")";
}

}  // namespace

std::optional<dom::element> reader::get(std::string_view k) {
  dom::element e;
  if (obj[k].get(e) != simdjson::SUCCESS) return std::nullopt;
  if (e.is_null()) return std::nullopt;
  return e;
}

void reader::wrong(std::string_view k, const char* want, const dom::element& e) {
  if (err) return;
  err = bad_request("'" + prefix + std::string(k) + "' must be " + want + ", not " + type_name(e.type()),
                    prefix + std::string(k));
}

void reader::str(std::string_view k, std::string& out) {
  if (auto e = get(k)) {
    if (e->is_string()) out = std::string(std::string_view(*e));
    else wrong(k, "a string", *e);
  }
}

void reader::boolean(std::string_view k, bool& out) {
  if (auto e = get(k)) {
    if (e->is_bool()) out = bool(*e);
    else wrong(k, "a boolean", *e);
  }
}

void reader::number(std::string_view k, double& out) {
  if (auto e = get(k)) {
    if (e->is_number()) out = double(*e);
    else wrong(k, "a number", *e);
  }
}

void reader::integer(std::string_view k, int64_t& out) {
  if (auto e = get(k)) {
    if (e->is_int64()) out = int64_t(*e);
    else if (e->is_uint64()) wrong(k, "an integer within range", *e);
    // A decimal number is refused even when it is whole (2.0, or 1e-400 which reads as 0), as
    // OpenAI does: a client that sends one has a bug worth hearing about.
    else if (e->is_double()) {
      if (!err)
        err = bad_request("'" + prefix + std::string(k) + "' must be an integer, not a decimal number",
                          prefix + std::string(k));
    } else wrong(k, "an integer", *e);
  }
}

namespace {

// The first key that appears twice in an object anywhere under `e`; `path` names where.
bool find_duplicate(const dom::element& e, const std::string& path, std::string& key, std::string& where) {
  if (e.is_object()) {
    std::vector<std::string_view> keys;
    for (auto kv : dom::object(e)) keys.push_back(kv.key);
    if (keys.size() > 1) {
      std::vector<std::string_view> sorted = keys;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 1; i < sorted.size(); ++i) {
        if (sorted[i] == sorted[i - 1]) {
          key = std::string(sorted[i]);
          where = path;
          return true;
        }
      }
    }
    for (auto kv : dom::object(e))
      if (find_duplicate(kv.value, path.empty() ? std::string(kv.key) : path + "." + std::string(kv.key), key, where))
        return true;
  } else if (e.is_array()) {
    size_t i = 0;
    for (dom::element x : dom::array(e))
      if (find_duplicate(x, path + "[" + std::to_string(i++) + "]", key, where)) return true;
  }
  return false;
}

}  // namespace

bool parse_object(std::string_view body, dom::object& obj, api_error& err) {
  // A UTF-8 byte order mark before the text is ignored (RFC 8259 8.1 allows it; Windows tools
  // write one).
  if (body.substr(0, 3) == "\xEF\xBB\xBF") body.remove_prefix(3);
  dom::element root;
  auto ec = tl_parser.parse(body.data(), body.size()).get(root);
  if (ec != simdjson::SUCCESS) {
    if (number_error(ec)) {
      if (const std::string where = locate_bad_number(body); !where.empty()) {
        err = bad_request("'" + where + "' is a number out of range (integers must fit in 64 bits, others in a double)",
                          where, "invalid_json");
        return false;
      }
    }
    err = bad_request(describe_parse_error(ec), {}, "invalid_json");
    return false;
  }
  if (!root.is_object()) {
    err = bad_request("the body must be a JSON object", {}, "invalid_json");
    return false;
  }
  std::string key, where;
  if (find_duplicate(root, {}, key, where)) {
    const std::string param = where.empty() ? key : where + "." + key;
    err = bad_request("duplicate key '" + key + "'" + (where.empty() ? "" : " in '" + where + "'") +
                          ": each key may appear once",
                      param, "duplicate_key");
    return false;
  }
  obj = dom::object(root);
  return true;
}

void known_fields(reader& r, std::initializer_list<std::string_view> known) {
  if (r.err) return;
  for (auto kv : r.obj) {
    if (std::find(known.begin(), known.end(), kv.key) == known.end()) {
      const std::string name = r.prefix + std::string(kv.key);
      r.err = bad_request("unknown field '" + name + "'", name, "unknown_field");
      return;
    }
  }
}

void refuse(reader& r, std::string_view k, const std::string& why) {
  if (r.err || !r.get(k)) return;
  const std::string name = r.prefix + std::string(k);
  r.err = bad_request("'" + name + "' is not supported by this server: " + why, name, "unsupported_field");
}

namespace {

// The JSON text of an element (a schema, a choice list), as the constraint compiler reads it.
std::string json_text(const dom::element& e) { return simdjson::minify(e); }

// Keeps the one constraint a request may have; a second is named with the first.
struct constraint_slot {
  reader& r;
  actors::request_spec& s;
  std::string from;  // the field that set it
  void set(const std::string& field, const char* kind, std::string source) {
    if (r.err) return;
    if (!from.empty()) {
      r.err = bad_request("'" + from + "' and '" + field + "' both constrain the output: send one of them", field);
      return;
    }
    from = field;
    s.constraint = {kind, std::move(source)};
  }
};

// `e` kept in r (the first error stands); false, for the readers below to return.
bool failed(reader& r, api_error e) {
  if (!r.err) r.err = std::move(e);
  return false;
}

// A non-empty string field of a constraint object.
bool constraint_string(reader& r, const dom::element& e, const std::string& name, std::string& out) {
  if (!e.is_string()) return failed(r, bad_request("'" + name + "' must be a string", name));
  out = std::string(std::string_view(e));
  if (out.empty()) return failed(r, bad_request("'" + name + "' must not be empty", name));
  return true;
}

// A choice list: a non-empty array of strings, kept as its JSON text.
bool constraint_choice(reader& r, const dom::element& e, const std::string& name, std::string& out) {
  bool strings = e.is_array() && dom::array(e).size() > 0;
  for (size_t i = 0; strings && i < dom::array(e).size(); ++i) strings = dom::array(e).at(i).is_string();
  if (!strings) return failed(r, bad_request("'" + name + "' must be a non-empty array of strings", name));
  out = json_text(e);
  return true;
}

// Token ids ([1, 2, 3]): each an integer in int32's range (admission checks the vocabulary).
// A JSON schema given as an object (or, as vLLM allows, its JSON text in a string).
bool constraint_schema(reader& r, const dom::element& e, const std::string& name, std::string& out) {
  if (e.is_object()) {
    out = json_text(e);
    return true;
  }
  if (e.is_string() && !std::string_view(e).empty()) {
    out = std::string(std::string_view(e));
    return true;
  }
  r.err = bad_request("'" + name + "' must be a JSON Schema object", name);
  return false;
}

void read_response_format(reader& r, constraint_slot& slot) {
  auto e = r.get("response_format");
  if (!e) return;
  if (!e->is_object()) return r.wrong("response_format", "an object", *e);
  reader f{dom::object(*e), std::nullopt, "response_format."};
  known_fields(f, {"type", "json_schema"});
  std::string type;
  f.str("type", type);
  if (!f.err && type != "text" && type != "json_object" && type != "json_schema")
    f.err = bad_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                        "response_format.type");
  if (!f.err && type != "json_schema" && f.get("json_schema"))
    f.err = bad_request("'response_format.json_schema' goes with type \"json_schema\"", "response_format.json_schema");
  if (!f.err && type == "json_object") slot.set("response_format", structured::kind::json_object, "");
  if (!f.err && type == "json_schema") {
    auto js = f.get("json_schema");
    if (!js || !js->is_object()) {
      f.err = bad_request("'response_format.json_schema' must be an object with a 'schema'", "response_format.json_schema");
    } else {
      reader j{dom::object(*js), std::nullopt, "response_format.json_schema."};
      known_fields(j, {"name", "schema", "strict", "description"});
      std::string name, description;
      bool strict = false;
      j.str("name", name);
      j.str("description", description);  // a hint for a model told the schema in words; the grammar is the schema
      j.boolean("strict", strict);  // the output always follows the schema, strict or not
      if (!j.err && !j.get("name"))  // required, as at OpenAI (its client's parse() always sends one)
        j.err = bad_request("'response_format.json_schema.name' is required", "response_format.json_schema.name");
      if (!j.err) {
        const bool ok = name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                        });
        if (!ok)
          j.err = bad_request("'response_format.json_schema.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
                              "response_format.json_schema.name");
      }
      auto schema = j.get("schema");
      std::string source;
      if (!j.err && !schema)
        j.err = bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
      else if (!j.err && !schema->is_object())
        j.wrong("schema", "an object", *schema);
      else if (!j.err)
        source = json_text(*schema);
      if (j.err) f.err = j.err;
      else slot.set("response_format", structured::kind::json_schema, std::move(source));
    }
  }
  if (f.err && !r.err) r.err = f.err;
}

void read_constraints(reader& r, actors::request_spec& s) {
  constraint_slot slot{r, s, {}};
  read_response_format(r, slot);
  std::string src;
  if (auto e = r.get("grammar"); e && !r.err && constraint_string(r, *e, "grammar", src))
    slot.set("grammar", structured::kind::grammar, src);
  if (auto e = r.get("structured_outputs"); e && !r.err) {
    if (!e->is_object()) return r.wrong("structured_outputs", "an object", *e);
    reader so{dom::object(*e), std::nullopt, "structured_outputs."};
    known_fields(so, {"json", "regex", "choice", "grammar", "json_object"});
    if (so.err) {
      r.err = so.err;
      return;
    }
    for (auto kv : dom::object(*e)) {
      if (r.err) return;
      if (kv.value.is_null()) continue;
      const std::string name = "structured_outputs." + std::string(kv.key);
      if (kv.key == "json") {
        if (constraint_schema(r, kv.value, name, src)) slot.set(name, structured::kind::json_schema, src);
      } else if (kv.key == "regex") {
        if (constraint_string(r, kv.value, name, src)) slot.set(name, structured::kind::regex, src);
      } else if (kv.key == "choice") {
        if (constraint_choice(r, kv.value, name, src)) slot.set(name, structured::kind::choice, src);
      } else if (kv.key == "grammar") {
        if (constraint_string(r, kv.value, name, src)) slot.set(name, structured::kind::grammar, src);
      } else if (kv.key == "json_object") {
        if (!kv.value.is_bool()) r.err = bad_request("'" + name + "' must be a boolean", name);
        else if (bool(kv.value)) slot.set(name, structured::kind::json_object, "");
      }
    }
  }
  // vLLM's older names.
  if (auto e = r.get("guided_json"); e && !r.err && constraint_schema(r, *e, "guided_json", src))
    slot.set("guided_json", structured::kind::json_schema, src);
  if (auto e = r.get("guided_regex"); e && !r.err && constraint_string(r, *e, "guided_regex", src))
    slot.set("guided_regex", structured::kind::regex, src);
  if (auto e = r.get("guided_choice"); e && !r.err && constraint_choice(r, *e, "guided_choice", src))
    slot.set("guided_choice", structured::kind::choice, src);
  if (auto e = r.get("guided_grammar"); e && !r.err && constraint_string(r, *e, "guided_grammar", src))
    slot.set("guided_grammar", structured::kind::grammar, src);
}

// `logit_bias`: {"token id": bias in [-100, 100]}. Ids beyond the vocabulary are checked where
// the vocabulary is known (the HTTP and WebSocket sessions, through net::inference).
void read_logit_bias(reader& r, actors::request_spec& s) {
  auto e = r.get("logit_bias");
  if (!e || r.err) return;
  if (!e->is_object()) return r.wrong("logit_bias", "an object of token id -> bias", *e);
  dom::object o(*e);
  if (o.size() > 1024) return void(r.err = bad_request("'logit_bias' has more than 1024 entries", "logit_bias"));
  for (auto kv : o) {
    const std::string name = "logit_bias." + std::string(kv.key);
    const std::string_view k = kv.key;
    const bool digits = !k.empty() && k.size() <= 9 &&
                        std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      r.err = bad_request("'logit_bias' keys must be token ids (decimal integers), not '" + std::string(k) + "'", name);
      return;
    }
    if (!kv.value.is_number()) {
      r.err = bad_request("'" + name + "' must be a number in [-100, 100]", name);
      return;
    }
    const double b = double(kv.value);
    if (!(b >= -100.0 && b <= 100.0)) {
      r.err = bad_request("'" + name + "' must be in [-100, 100]", name);
      return;
    }
    const auto token = static_cast<int32_t>(std::stol(std::string(k)));
    // Two spellings of one id ("5" and "05") are the duplicate key a proxy would not see.
    for (const auto& earlier : s.sampling.logit_bias)
      if (earlier.token == token) {
        r.err = bad_request("'logit_bias' gives token " + std::to_string(token) + " twice ('" + std::string(k) +
                                "' and an earlier spelling)",
                            name, "duplicate_key");
        return;
      }
    s.sampling.logit_bias.push_back({token, static_cast<float>(b)});
  }
}

}  // namespace

std::string constraint_field(reader& r) {
  for (const char* k : {"response_format", "structured_outputs", "grammar", "guided_json", "guided_regex", "guided_choice",
                        "guided_grammar"})
    if (r.get(k)) return k;
  return {};
}

void bypass_cache_for(reader& r, actors::request_spec& s, bool asked, const char* field) {
  if (!asked || r.err) return;
  if (s.cache == cache::cache_choice::requested) {
    r.err = bad_request(std::string("'cache': true cannot go with '") + field +
                            "': the response cache neither keys nor keeps it",
                        "cache");
    return;
  }
  s.cache = cache::cache_choice::refused;
}

void read_common(reader& r, actors::request_spec& s, float max_temperature) {
  r.str("model", s.model);
  int64_t max_tokens = 0;
  const char* max_name = r.get("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (!r.err && r.get("max_completion_tokens") && r.get("max_tokens"))
    r.err = bad_request("send 'max_tokens' or 'max_completion_tokens', not both", "max_completion_tokens");
  r.integer(max_name, max_tokens);
  // 0 is refused as OpenAI does (it used to mean "the default", a surprise for a client that
  // asked for nothing); leave the field out for the default.
  if (!r.err && r.get(max_name) && max_tokens <= 0)
    r.err = bad_request(std::string("'") + max_name + "' must be at least 1", max_name);
  if (!r.err && max_tokens > (1 << 30)) r.err = bad_request(std::string("'") + max_name + "' is too large", max_name);
  s.max_tokens = static_cast<int32_t>(max_tokens);
  r.real("temperature", s.sampling.temperature);
  r.real("top_p", s.sampling.top_p);
  r.int_as("top_k", s.sampling.top_k);
  if (s.sampling.top_k == -1) s.sampling.top_k = 0;  // -1: off, as vLLM spells it
  r.real("min_p", s.sampling.min_p);
  r.real("frequency_penalty", s.sampling.frequency_penalty);
  r.real("presence_penalty", s.sampling.presence_penalty);
  r.real("repetition_penalty", s.sampling.repetition_penalty);
  // OpenAI's API takes temperature in [0, 2] (its 400 names it); the sampler's own range, which
  // the WebSocket protocol keeps, is [0, 100] (sampling_params::validate, below).
  if (!r.err && !(s.sampling.temperature >= 0.0f && s.sampling.temperature <= max_temperature)) {
    char range[40];
    std::snprintf(range, sizeof range, "'temperature' must be in [0, %g]", static_cast<double>(max_temperature));
    r.err = bad_request(range, "temperature");
  }
  // Any 64-bit integer, signed or not (a negative one wraps).
  const bool seeded = r.get("seed").has_value();
  if (auto e = r.get("seed"); e && e->is_uint64() && !e->is_int64()) {
    s.sampling.seed = uint64_t(*e);
  } else {
    int64_t seed = static_cast<int64_t>(s.sampling.seed);
    r.integer("seed", seed);
    s.sampling.seed = static_cast<uint64_t>(seed);
  }
  r.int_as("priority", s.priority);
  r.boolean("ignore_eos", s.ignore_eos);
  // Absent (or null) leaves the cache's own rule; true and false choose.
  if (auto e = r.get("cache")) {
    if (e->is_bool()) s.cache = bool(*e) ? cache::cache_choice::requested : cache::cache_choice::refused;
    else r.wrong("cache", "a boolean", *e);
  }
  // Speculative decoding: a method name, or false for "off". Absent (or null): the server's
  // [speculative] method. The name is checked where the proposers are (the scheduler): an unknown
  // one fails the request with a 400 that lists the known ones.
  if (auto e = r.get("speculative")) {
    if (e->is_bool() && !bool(*e)) {
      s.speculative = "off";
    } else if (e->is_string() && !std::string_view(*e).empty()) {
      s.speculative = std::string(std::string_view(*e));
    } else if (!r.err) {
      r.err = bad_request("'speculative' must be a method name (\"ngram\", \"suffix\", \"draft\", \"off\") or false", "speculative");
    }
  }
  int64_t deadline = 0;
  r.integer("deadline_ms", deadline);
  s.deadline_ms = deadline;
  if (auto e = r.get("stop")) {
    if (e->is_string()) {
      s.stop.emplace_back(std::string_view(*e));
    } else if (e->is_array()) {
      for (dom::element x : dom::array(*e)) {
        if (!x.is_string()) {
          r.wrong("stop", "a string or an array of strings", x);
          break;
        }
        s.stop.emplace_back(std::string_view(x));
      }
      if (!r.err && s.stop.size() > max_stop_strings)
        r.err = bad_request("'stop' has more than " + std::to_string(max_stop_strings) + " strings", "stop");
    } else {
      r.wrong("stop", "a string or an array of strings", *e);
    }
    for (const auto& st : s.stop) {
      if (r.err) break;
      if (st.empty()) r.err = bad_request("'stop' strings must not be empty", "stop");
      else if (st.find('\0') != std::string::npos) r.err = bad_request("'stop' strings must not contain NUL (\\u0000)", "stop");
    }
  }
  // A sampled request without a seed gets a fresh one, as at OpenAI and llama-server: asking
  // again gives another answer (with seed 0 for all, every retry repeated the first). Greedy ones
  // keep 0 (they use no seed, and the exact cache's key includes it), and so does `cache: true`
  // (the client takes a stored answer; a fresh seed would never find one).
  if (!seeded && s.sampling.temperature > 0.0f && s.cache != cache::cache_choice::requested) {
    thread_local std::mt19937_64 draw{std::random_device{}()};
    s.sampling.seed = draw();
  }
  read_logit_bias(r, s);
  bypass_cache_for(r, s, !s.sampling.logit_bias.empty(), "logit_bias");
  read_constraints(r, s);
  if (!r.err) {
    if (auto v = s.sampling.validate(); !v) {
      // The message starts with the field it is about ("top_p must be in (0, 1]"): name it.
      const std::string& m = v.error();
      r.err = bad_request(m, m.substr(0, m.find(' ')));
    }
  }
}

namespace {

// OpenAI's pattern for a message's `name`, ^[^\s<|\\/>]+$, and no control characters.
bool valid_participant_name(const std::string& n) {
  return !n.empty() && std::none_of(n.begin(), n.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return std::isspace(u) || std::iscntrl(u) || c == '<' || c == '|' || c == '\\' || c == '/' || c == '>';
  });
}

bool valid_function_name(const std::string& n) {
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// An assistant message's `tool_calls`: [{"id","type":"function","function":{"name","arguments"}}].
void read_tool_calls(reader& mr, const std::string& at, actors::chat_message& cm) {
  auto e = mr.get("tool_calls");
  if (!e) return;
  if (!e->is_array()) return mr.wrong("tool_calls", "an array", *e);
  size_t i = 0;
  for (dom::element c : dom::array(*e)) {
    const std::string here = at + "tool_calls[" + std::to_string(i++) + "]";
    if (!c.is_object()) {
      mr.err = bad_request("'" + here + "' must be an object", here);
      return;
    }
    reader cr{dom::object(c), std::nullopt, here + "."};
    known_fields(cr, {"id", "type", "function", "index"});
    actors::tool_call tc;
    std::string type = "function";
    cr.str("id", tc.id);
    cr.str("type", type);
    if (!cr.err && type != "function") cr.err = bad_request("'" + here + ".type' must be \"function\"", here + ".type");
    auto f = cr.get("function");
    if (!cr.err && (!f || !f->is_object()))
      cr.err = bad_request("'" + here + ".function' must be an object with 'name' and 'arguments'", here + ".function");
    if (!cr.err) {
      reader fr{dom::object(*f), std::nullopt, here + ".function."};
      known_fields(fr, {"name", "arguments", "parsed_arguments"});  // the last: .parse()'s copy of arguments
      fr.str("name", tc.name);
      fr.str("arguments", tc.arguments);  // JSON text, as OpenAI sends it: an object here is a wrong type
      if (!fr.err && tc.name.empty())
        fr.err = bad_request("'" + here + ".function.name' is required", here + ".function.name");
      if (fr.err) cr.err = fr.err;
    }
    if (cr.err) {
      mr.err = cr.err;
      return;
    }
    cm.tool_calls.push_back(std::move(tc));
  }
}

}  // namespace

void read_messages(reader& r, actors::request_spec& s) {
  auto e = r.get("messages");
  if (!e) return;
  if (!e->is_array()) return r.wrong("messages", "an array", *e);
  size_t i = 0;
  std::vector<std::string> call_ids;  // of the assistant messages' tool_calls so far
  for (dom::element m : dom::array(*e)) {
    const std::string at = "messages[" + std::to_string(i++) + "].";
    if (!m.is_object()) {
      r.err = bad_request("'" + at.substr(0, at.size() - 1) + "' must be an object", at.substr(0, at.size() - 1));
      return;
    }
    reader mr{dom::object(m), std::nullopt, at};
    // `refusal`, `annotations`, `audio`, `function_call`: an answer's own fields, null when the openai
    // client sends an answer back; `parsed` (a call's `parsed_arguments`): .parse()'s copy of content.
    known_fields(mr, {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "annotations", "audio",
                      "function_call", "parsed"});
    actors::chat_message cm;
    mr.str("role", cm.role);
    if (cm.role == "developer") cm.role = "system";  // OpenAI's newer name for the system message
    if (!mr.err && cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool") {
      r.err = bad_request("'" + at + "role' must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"",
                          at + "role");
      return;
    }
    const auto content = mr.get("content");
    if (content) {
      if (content->is_string()) {
        cm.content = std::string(std::string_view(*content));
      } else if (content->is_array()) {
        // An empty list of parts is no content (OpenAI refuses it too), but for a tool-calling answer.
        if (dom::array(*content).size() == 0 && cm.role != "assistant")
          mr.err = bad_request("'" + at + "content' must not be an empty array", at + "content");
        size_t j = 0;
        for (dom::element part : dom::array(*content)) {
          const std::string here = at + "content[" + std::to_string(j++) + "]";
          if (!part.is_object()) {
            mr.err = bad_request("'" + here + "' must be a {\"type\":\"text\",\"text\":...} part", here);
            break;
          }
          reader pr{dom::object(part), std::nullopt, here + "."};
          if (!pr.get("type"))  // as OpenAI: a part says what it is
            pr.err = bad_request("'" + here + ".type' is required (\"text\")", here + ".type");
          std::string type;
          pr.str("type", type);
          if (!pr.err && type != "text") {
            // Other parts (image_url, input_audio, file, refusal) need what a text model lacks: named.
            pr.err = bad_request("'" + here + ".type' \"" + type +
                                     "\" is not supported by this server: it reads text parts only "
                                     "({\"type\":\"text\",\"text\":...})",
                                 here + ".type", "unsupported_field");
          }
          if (!pr.err) known_fields(pr, {"type", "text", "prompt_cache_breakpoint"});
          refuse(pr, "prompt_cache_breakpoint", "explicit prompt-cache breakpoints are not served");
          if (!pr.err && !pr.get("text")) pr.err = bad_request("'" + here + ".text' is required", here + ".text");
          std::string text;
          pr.str("text", text);
          if (pr.err) {
            mr.err = pr.err;
            break;
          }
          if (j > 1) cm.content += '\n';  // parts joined by a line break, as llama.cpp and vLLM join them
          cm.content += text;
        }
      } else {
        mr.wrong("content", "a string or an array of text parts", *content);
      }
    }
    if (cm.role == "assistant") {
      read_tool_calls(mr, at, cm);
      refuse(mr, "refusal", "an earlier refusal cannot be part of the conversation (send it as 'content')");
      refuse(mr, "annotations", "annotations are not read back");
      refuse(mr, "audio", "this server answers in text only");
      refuse(mr, "function_call", "the legacy function call is not read (send 'tool_calls')");
    } else if (!mr.err) {
      if (mr.get("tool_calls"))
        mr.err = bad_request("'" + at + "tool_calls' is only read on assistant messages", at + "tool_calls");
      for (const char* k : {"refusal", "annotations", "audio", "function_call", "parsed"})
        if (!mr.err && dom::object(m)[k].error() == simdjson::SUCCESS)
          mr.err = bad_request("'" + at + k + "' is only read on assistant messages", at + k);
    }
    if (cm.role == "tool") {
      mr.str("tool_call_id", cm.tool_call_id);
      mr.str("name", cm.name);
      if (!mr.err && cm.tool_call_id.empty())
        mr.err = bad_request("'" + at + "tool_call_id' is required on a tool message", at + "tool_call_id");
      // A result answers a call an earlier assistant message made (OpenAI refuses others too): one
      // of no call would be rendered as the answer to nothing.
      if (!mr.err && std::find(call_ids.begin(), call_ids.end(), cm.tool_call_id) == call_ids.end())
        mr.err = bad_request("'" + at + "tool_call_id' \"" + cm.tool_call_id +
                                 "\" answers no call of an earlier assistant message's 'tool_calls'",
                             at + "tool_call_id");
    } else if (!mr.err && mr.get("tool_call_id")) {
      mr.err = bad_request("'" + at + "tool_call_id' is only read on tool messages", at + "tool_call_id");
    } else {
      // The participant's name (multi-agent histories, few-shot speakers): the chat template
      // writes it into the turn (model/chat_template.hpp says where), so its text is held to
      // OpenAI's pattern, which also keeps a name from opening or closing a turn.
      mr.str("name", cm.name);
      if (!mr.err && mr.get("name") && !valid_participant_name(cm.name))
        mr.err = bad_request("'" + at + "name' must be 1 or more characters, none of them whitespace, a control "
                                 "character or one of < | \\ / >", at + "name");
    }
    // Content is required, except on an assistant message that calls tools (null or absent there).
    if (!mr.err && !content && !(cm.role == "assistant" && !cm.tool_calls.empty()))
      mr.err = bad_request("'" + at + "content' is required", at + "content");
    if (mr.err) {
      r.err = mr.err;
      return;
    }
    for (const auto& c : cm.tool_calls) call_ids.push_back(c.id);
    s.messages.push_back(std::move(cm));
  }
  if (s.messages.empty()) r.err = bad_request("'messages' must not be empty", "messages");
}

// What a function's `parameters` schema says its top level is, when that is not an object: "" for
// {"type":"object",...} and for a schema without `type` (its keywords then constrain an object,
// as OpenAI reads it).
std::string not_an_object_schema(dom::object schema) {
  dom::element type;
  if (schema["type"].get(type) != simdjson::SUCCESS) return "";
  if (type.is_string()) return std::string_view(type) == "object" ? "" : "type \"" + std::string(std::string_view(type)) + "\"";
  return "type " + json_text(type);
}

void read_tools(reader& r, actors::request_spec& s) {
  if (auto e = r.get("tools"); e && !r.err) {
    if (!e->is_array()) return r.wrong("tools", "an array", *e);
    if (dom::array(*e).size() == 0)  // as OpenAI: leave `tools` out to offer none
      return void(r.err = bad_request("'tools' must not be an empty array (leave it out to offer no tools)", "tools"));
    size_t i = 0;
    for (dom::element t : dom::array(*e)) {
      const std::string here = "tools[" + std::to_string(i++) + "]";
      if (!t.is_object()) return void(r.err = bad_request("'" + here + "' must be an object", here));
      reader tr{dom::object(t), std::nullopt, here + "."};
      std::string type;
      tr.str("type", type);
      if (!tr.err && type != "function")
        tr.err = bad_request("'" + here + ".type' \"" + type + "\" is not served: \"function\" is the only tool type",
                             here + ".type", "unsupported_field");
      known_fields(tr, {"type", "function"});
      auto f = tr.get("function");
      if (!tr.err && (!f || !f->is_object()))
        tr.err = bad_request("'" + here + ".function' must be an object with a 'name'", here + ".function");
      actors::tool_spec ts;
      if (!tr.err) {
        reader fr{dom::object(*f), std::nullopt, here + ".function."};
        known_fields(fr, {"name", "description", "parameters", "strict"});
        fr.str("name", ts.name);
        fr.str("description", ts.description);
        fr.boolean("strict", ts.strict);
        if (!fr.err && !valid_function_name(ts.name))
          fr.err = bad_request("'" + here + ".function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -",
                               here + ".function.name");
        if (auto p = fr.get("parameters"); p && !fr.err) {
          if (!p->is_object()) fr.wrong("parameters", "a JSON Schema object", *p);
          else if (auto why = not_an_object_schema(dom::object(*p)); !why.empty())
            fr.err = bad_request("'" + here + ".function.parameters' must be a JSON Schema of type \"object\" (the "
                                     "arguments are a JSON object), not " + why,
                                 here + ".function.parameters");
          else ts.parameters = json_text(*p);
        }
        if (fr.err) tr.err = fr.err;
      }
      if (tr.err) {
        r.err = tr.err;
        return;
      }
      for (const auto& other : s.tools)
        if (other.name == ts.name) {
          r.err = bad_request("'" + here + ".function.name' '" + ts.name + "' is given twice", here + ".function.name");
          return;
        }
      s.tools.push_back(std::move(ts));
    }
  }
  r.boolean("parallel_tool_calls", s.parallel_tool_calls);
  auto c = r.get("tool_choice");
  if (!c || r.err) return;
  if (c->is_string()) {
    const std::string v{std::string_view(*c)};
    if (v != actors::tool_choice::automatic && v != actors::tool_choice::none && v != actors::tool_choice::required) {
      r.err = bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\":\"function\",...}",
                          "tool_choice");
      return;
    }
    s.tool_choice = v;
  } else if (c->is_object()) {
    reader cr{dom::object(*c), std::nullopt, "tool_choice."};
    std::string type;
    cr.str("type", type);
    if (!cr.err && type != "function")
      cr.err = bad_request("'tool_choice.type' \"" + type + "\" is not served: it must be \"function\"",
                           "tool_choice.type", "unsupported_field");
    known_fields(cr, {"type", "function"});
    auto f = cr.get("function");
    if (!cr.err && (!f || !f->is_object()))
      cr.err = bad_request("'tool_choice.function' must be an object with a 'name'", "tool_choice.function");
    if (!cr.err) {
      reader fr{dom::object(*f), std::nullopt, "tool_choice.function."};
      known_fields(fr, {"name"});
      fr.str("name", s.tool_choice_name);
      if (fr.err) cr.err = fr.err;
    }
    if (cr.err) {
      r.err = cr.err;
      return;
    }
    const bool known = std::any_of(s.tools.begin(), s.tools.end(),
                                   [&](const actors::tool_spec& t) { return t.name == s.tool_choice_name; });
    if (!known) {
      r.err = bad_request("'tool_choice.function.name' '" + s.tool_choice_name + "' is not one of 'tools'",
                          "tool_choice.function.name");
      return;
    }
    s.tool_choice = actors::tool_choice::function;
  } else {
    return r.wrong("tool_choice", "a string or an object", *c);
  }
  if (s.tools.empty() && s.tool_choice == actors::tool_choice::required)
    r.err = bad_request("'tool_choice' \"required\" needs 'tools'", "tool_choice");
}

}  // namespace troupe::net::detail

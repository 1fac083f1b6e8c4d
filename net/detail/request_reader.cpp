#include "net/detail/request_reader.hpp"

#include <cmath>

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

std::string describe_parse_error(simdjson::error_code ec) {
  if (ec == simdjson::NUMBER_ERROR || ec == simdjson::NUMBER_OUT_OF_RANGE)
    return "a number in the body is malformed or out of range (integers must fit in 64 bits)";
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
    else if (e->is_double() && std::fabs(double(*e)) < 9.0e18 &&
             double(*e) == static_cast<double>(static_cast<int64_t>(double(*e))))
      out = static_cast<int64_t>(double(*e));
    else if (e->is_double() && std::nearbyint(double(*e)) == double(*e))
      wrong(k, "an integer within range", *e);
    else wrong(k, "an integer", *e);
  }
}

bool parse_object(std::string_view body, dom::object& obj, api_error& err) {
  dom::element root;
  auto ec = tl_parser.parse(body.data(), body.size()).get(root);
  if (ec != simdjson::SUCCESS) {
    err = bad_request(describe_parse_error(ec), {}, "invalid_json");
    return false;
  }
  if (!root.is_object()) {
    err = bad_request("the body must be a JSON object", {}, "invalid_json");
    return false;
  }
  obj = dom::object(root);
  return true;
}

void read_common(reader& r, actors::request_spec& s) {
  r.str("model", s.model);
  int64_t max_tokens = 0;
  r.integer("max_tokens", max_tokens);
  r.integer("max_completion_tokens", max_tokens);
  if (!r.err && max_tokens < 0) r.err = bad_request("'max_tokens' must not be negative", "max_tokens");
  if (!r.err && max_tokens > (1 << 30)) r.err = bad_request("'max_tokens' is too large", "max_tokens");
  s.max_tokens = static_cast<int32_t>(max_tokens);
  r.real("temperature", s.sampling.temperature);
  r.real("top_p", s.sampling.top_p);
  r.int_as("top_k", s.sampling.top_k);
  if (s.sampling.top_k == -1) s.sampling.top_k = 0;  // -1: off, as vLLM spells it
  r.real("min_p", s.sampling.min_p);
  r.real("frequency_penalty", s.sampling.frequency_penalty);
  r.real("presence_penalty", s.sampling.presence_penalty);
  r.real("repetition_penalty", s.sampling.repetition_penalty);
  // Any 64-bit integer, signed or not (a negative one wraps).
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
    } else {
      r.wrong("stop", "a string or an array of strings", *e);
    }
  }
  if (!r.err) {
    if (auto v = s.sampling.validate(); !v) {
      // The message starts with the field it is about ("top_p must be in (0, 1]"): name it.
      const std::string& m = v.error();
      r.err = bad_request(m, m.substr(0, m.find(' ')));
    }
  }
}

void read_messages(reader& r, actors::request_spec& s) {
  auto e = r.get("messages");
  if (!e) return;
  if (!e->is_array()) return r.wrong("messages", "an array", *e);
  size_t i = 0;
  for (dom::element m : dom::array(*e)) {
    const std::string at = "messages[" + std::to_string(i++) + "].";
    if (!m.is_object()) {
      r.err = bad_request("'" + at.substr(0, at.size() - 1) + "' must be an object", at.substr(0, at.size() - 1));
      return;
    }
    reader mr{dom::object(m), std::nullopt, at};
    actors::chat_message cm;
    mr.str("role", cm.role);
    if (auto c = mr.get("content")) {
      if (c->is_string()) {
        cm.content = std::string(std::string_view(*c));
      } else if (c->is_array()) {
        for (dom::element part : dom::array(*c)) {
          dom::element t;
          if (part.is_object() && dom::object(part)["text"].get(t) == simdjson::SUCCESS && t.is_string())
            cm.content += std::string_view(t);
          else {
            mr.err = bad_request("'" + at + "content' parts must be {\"type\":\"text\",\"text\":...}", at + "content");
            break;
          }
        }
      } else {
        mr.wrong("content", "a string or an array of text parts", *c);
      }
    }
    if (mr.err) {
      r.err = mr.err;
      return;
    }
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant") {
      r.err = bad_request("'" + at + "role' must be \"system\", \"user\" or \"assistant\"", at + "role");
      return;
    }
    s.messages.push_back(std::move(cm));
  }
  if (s.messages.empty()) r.err = bad_request("'messages' must not be empty", "messages");
}

void read_prompt(reader& r, actors::request_spec& s, bool& seen) {
  auto e = r.get("prompt");
  if (!e) return;
  seen = true;
  if (e->is_string()) {
    s.prompt = std::string(std::string_view(*e));
  } else if (e->is_array()) {
    dom::array a(*e);
    if (a.size() != 1 || !a.at(0).is_string()) {
      r.err = bad_request("'prompt' must be a string (or an array of exactly one string)", "prompt");
      return;
    }
    s.prompt = std::string(std::string_view(a.at(0)));
  } else {
    r.wrong("prompt", "a string", *e);
  }
}

}  // namespace troupe::net::detail

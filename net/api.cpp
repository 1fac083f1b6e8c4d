#include "net/api.hpp"

#include <cmath>
#include <limits>

#include <simdjson.h>

#include "net/json_writer.hpp"

namespace troupe::net {

namespace dom = simdjson::dom;

api_error bad_request(std::string message, std::string param, std::string code) {
  api_error e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

api_error from_pipeline_error(const actors::error_event& ev) {
  namespace errc = actors::errc;
  api_error e;
  e.code = ev.code;
  e.message = ev.message;
  const std::string& c = ev.code;
  if (c == errc::invalid_request || c == errc::context_length || c == errc::kv_capacity) {
    e.status = 400;
  } else if (c == errc::unknown_model) {
    e.status = 404;
  } else if (c == errc::overloaded || c == errc::rate_limited) {
    e.status = 429;
    e.type = c == errc::overloaded ? "server_overloaded" : "rate_limit_exceeded";
  } else if (c == errc::deadline || c == errc::timeout) {
    e.status = 504;
    e.type = "timeout";
  } else if (c == "loading") {
    e.status = 503;
    e.type = "service_unavailable";
  } else {
    e.status = 500;
    e.type = "server_error";
  }
  return e;
}

std::string error_json(const api_error& e) {
  json_writer w;
  w.begin_object().key("error").begin_object();
  w.field("message", e.message).field("type", e.type);
  w.key("code");
  if (e.code.empty()) w.null(); else w.value(e.code);
  w.key("param");
  if (e.param.empty()) w.null(); else w.value(e.param);
  w.end_object().end_object();
  return w.take();
}

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

// Field readers: an absent or null field leaves `out` alone; a wrong type is an error.
struct reader {
  dom::object obj;
  std::optional<api_error> err;
  std::string prefix;  // for nested objects' error messages

  std::optional<dom::element> get(std::string_view k) {
    dom::element e;
    if (obj[k].get(e) != simdjson::SUCCESS) return std::nullopt;
    if (e.is_null()) return std::nullopt;
    return e;
  }
  void wrong(std::string_view k, const char* want, const dom::element& e) {
    if (err) return;
    err = bad_request("'" + prefix + std::string(k) + "' must be " + want + ", not " + type_name(e.type()),
                      prefix + std::string(k));
  }
  void str(std::string_view k, std::string& out) {
    if (auto e = get(k)) {
      if (e->is_string()) out = std::string(std::string_view(*e));
      else wrong(k, "a string", *e);
    }
  }
  void boolean(std::string_view k, bool& out) {
    if (auto e = get(k)) {
      if (e->is_bool()) out = bool(*e);
      else wrong(k, "a boolean", *e);
    }
  }
  void number(std::string_view k, double& out) {
    if (auto e = get(k)) {
      if (e->is_number()) out = double(*e);
      else wrong(k, "a number", *e);
    }
  }
  template <class F>
  void real(std::string_view k, F& out) {
    double d = out;
    number(k, d);
    out = static_cast<F>(d);
  }
  void integer(std::string_view k, int64_t& out) {
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
  // An integer field narrower than 64 bits: a value that does not fit is named as out of range
  // (it used to wrap: top_k 10^12 read as a negative number).
  template <class I>
  void int_as(std::string_view k, I& out) {
    int64_t v = out;
    integer(k, v);
    if (err) return;
    constexpr int64_t lo = static_cast<int64_t>(std::numeric_limits<I>::min());
    constexpr int64_t hi = std::numeric_limits<I>::max() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                               ? std::numeric_limits<int64_t>::max()
                               : static_cast<int64_t>(std::numeric_limits<I>::max());
    if (v < lo || v > hi) {
      err = bad_request("'" + prefix + std::string(k) + "' is out of range (" + std::to_string(lo) + ".." +
                            std::to_string(hi) + ")",
                        prefix + std::string(k));
      return;
    }
    out = static_cast<I>(v);
  }
};

std::string describe_parse_error(simdjson::error_code ec) {
  if (ec == simdjson::NUMBER_ERROR || ec == simdjson::NUMBER_OUT_OF_RANGE)
    return "a number in the body is malformed or out of range (integers must fit in 64 bits)";
  return std::string("the body is not valid JSON (") + simdjson::error_message(ec) + ")";
}

// Reads the sampling fields shared by both endpoints and by the WebSocket `generate` frame.
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
  r.boolean("cache", s.cache);
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

// `content` is a string or an array of {"type":"text","text":...} parts.
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

}  // namespace

parsed_openai parse_openai_request(std::string_view body, bool chat) {
  parsed_openai out;
  dom::object obj;
  if (!parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  openai_request req;
  read_common(r, req.spec);
  req.model = req.spec.model;
  r.boolean("stream", req.stream);
  if (auto so = r.get("stream_options")) {
    if (!so->is_object()) r.wrong("stream_options", "an object", *so);
    else {
      reader sr{dom::object(*so), std::nullopt, "stream_options."};
      sr.boolean("include_usage", req.include_usage);
      if (sr.err) r.err = sr.err;
    }
  }
  int64_t n = 1;
  r.integer("n", n);
  if (!r.err && n != 1) r.err = bad_request("only n = 1 is supported", "n");
  // Token logprobs are not returned over HTTP: asking for them is refused by name rather than
  // answered with `logprobs: null` (false, 0 and null are accepted).
  if (auto lp = r.get("logprobs"); lp && !r.err) {
    const bool asked = lp->is_bool() ? bool(*lp) : lp->is_null() ? false : !(lp->is_int64() && int64_t(*lp) == 0);
    if (asked) r.err = bad_request("'logprobs' are not supported by this server (send false, 0 or leave it out)", "logprobs");
  }
  if (auto tl = r.get("top_logprobs"); tl && !r.err && !tl->is_null() && !(tl->is_int64() && int64_t(*tl) == 0))
    r.err = bad_request("'top_logprobs' are not supported by this server (send 0 or leave it out)", "top_logprobs");
  if (chat) {
    read_messages(r, req.spec);
    if (!r.err && req.spec.messages.empty()) r.err = bad_request("'messages' is required", "messages");
  } else {
    bool seen = false;
    read_prompt(r, req.spec, seen);
    if (!r.err && !seen) r.err = bad_request("'prompt' is required", "prompt");
  }
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.request = std::move(req);
  return out;
}

namespace {

void write_usage(json_writer& w, const actors::usage_info& u) {
  w.key("usage").begin_object();
  w.field("prompt_tokens", u.prompt_tokens).field("completion_tokens", u.completion_tokens);
  w.field("total_tokens", u.prompt_tokens + u.completion_tokens);
  w.key("prompt_tokens_details").begin_object().field("cached_tokens", u.cached_prompt_tokens).end_object();
  w.end_object();
}

void write_head(json_writer& w, const completion_result& r, const char* object) {
  w.field("id", r.id).field("object", object).field("created", r.created).field("model", r.model);
}

}  // namespace

std::string chat_completion_json(const completion_result& r) {
  json_writer w;
  w.begin_object();
  write_head(w, r, "chat.completion");
  w.key("choices").begin_array().begin_object();
  w.field("index", int64_t{0});
  w.key("message").begin_object().field("role", "assistant").field("content", r.text).end_object();
  w.key("logprobs").null();
  w.field("finish_reason", r.finish_reason);
  w.end_object().end_array();
  write_usage(w, r.usage);
  w.end_object();
  return w.take();
}

std::string text_completion_json(const completion_result& r) {
  json_writer w;
  w.begin_object();
  write_head(w, r, "text_completion");
  w.key("choices").begin_array().begin_object();
  w.field("index", int64_t{0}).field("text", r.text);
  w.key("logprobs").null();
  w.field("finish_reason", r.finish_reason);
  w.end_object().end_array();
  write_usage(w, r.usage);
  w.end_object();
  return w.take();
}

std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

namespace {

std::string chunk_json(const completion_result& head, const chunk_spec& c, bool chat) {
  json_writer w;
  w.begin_object();
  write_head(w, head, chat ? "chat.completion.chunk" : "text_completion");
  w.key("choices").begin_array();
  if (!c.no_choices) {
    w.begin_object().field("index", int64_t{0});
    if (chat) {
      w.key("delta").begin_object();
      if (c.role_only) w.field("role", "assistant").field("content", "");
      else if (c.finish_reason.empty() || !c.text.empty()) w.field("content", c.text);
      w.end_object();
    } else {
      w.field("text", c.text);
    }
    w.key("logprobs").null();
    w.key("finish_reason");
    if (c.finish_reason.empty()) w.null(); else w.value(c.finish_reason);
    w.end_object();
  }
  w.end_array();
  if (c.usage) write_usage(w, *c.usage);
  w.end_object();
  return w.take();
}

}  // namespace

std::string chat_chunk_json(const completion_result& head, const chunk_spec& c) { return chunk_json(head, c, true); }
std::string text_chunk_json(const completion_result& head, const chunk_spec& c) { return chunk_json(head, c, false); }

std::string models_json(const std::string& model_name, int64_t created) {
  json_writer w;
  w.begin_object().field("object", "list").key("data").begin_array();
  w.begin_object().field("id", model_name).field("object", "model").field("created", created);
  w.field("owned_by", "troupe").end_object();
  w.end_array().end_object();
  return w.take();
}

// ---- WebSocket ------------------------------------------------------------------------------

parsed_frame parse_client_frame(std::string_view text) {
  parsed_frame out;
  dom::object obj;
  if (!parse_object(text, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  client_frame f;
  // The id may be a string or an integer; it is echoed back as a string.
  if (auto e = r.get("id")) {
    if (e->is_string()) f.id = std::string(std::string_view(*e));
    else if (e->is_int64()) f.id = std::to_string(int64_t(*e));
    else if (e->is_uint64()) f.id = std::to_string(uint64_t(*e));
    else r.wrong("id", "a string or an integer", *e);
  }
  out.id = f.id;
  std::string type;
  r.str("type", type);
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  auto need_id = [&] {
    if (f.id.empty() && !r.err) r.err = bad_request("'" + type + "' needs an 'id'", "id");
  };
  if (type == "generate") {
    f.type = frame_type::generate;
    need_id();
    read_common(r, f.spec);
    read_messages(r, f.spec);
    bool seen = false;
    read_prompt(r, f.spec, seen);
    if (!r.err && f.spec.messages.empty() && !seen)
      r.err = bad_request("'generate' needs 'messages' or 'prompt'", "messages");
    if (!r.err && !f.spec.messages.empty() && seen)
      r.err = bad_request("'generate' takes 'messages' or 'prompt', not both", "prompt");
    r.str("resume_key", f.resume_key);
    if (!r.err && r.get("resume_key") && (f.resume_key.size() < 16 || f.resume_key.size() > 256))
      r.err = bad_request("'resume_key' must be 16 to 256 bytes (a secret only this client knows)", "resume_key");
  } else if (type == "cancel") {
    f.type = frame_type::cancel;
    need_id();
  } else if (type == "resume") {
    f.type = frame_type::resume;
    need_id();
    r.integer("from_index", f.from_index);
    if (!r.err && f.from_index < -1) r.err = bad_request("'from_index' must be -1 or more", "from_index");
    r.str("resume_key", f.resume_key);
    if (!r.err && f.resume_key.empty())
      r.err = bad_request("'resume' needs the 'resume_key' its 'generate' gave", "resume_key");
  } else if (type == "auth") {
    f.type = frame_type::auth;
    r.str("key", f.key);
  } else if (type == "ping") {
    f.type = frame_type::ping;
  } else if (type.empty()) {
    if (!r.err) r.err = bad_request("the frame needs a 'type'", "type", "unknown_type");
  } else {
    if (!r.err)
      r.err = bad_request("unknown frame type '" + type + "' (expected generate, cancel, resume, auth or ping)", "type",
                          "unknown_type");
  }
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.frame = std::move(f);
  return out;
}

std::string token_frame(std::string_view id, int32_t index, std::string_view text) {
  json_writer w;
  w.begin_object().field("type", "token").field("id", id).field("index", index).field("text", text).end_object();
  return w.take();
}

std::string done_frame(std::string_view id, const actors::done_event& d) {
  json_writer w;
  w.begin_object().field("type", "done").field("id", id).field("finish_reason", d.finish_reason);
  if (!d.text.empty()) w.field("text", d.text);
  w.key("usage").begin_object();
  w.field("prompt_tokens", d.usage.prompt_tokens).field("completion_tokens", d.usage.completion_tokens);
  w.field("cached_prompt_tokens", d.usage.cached_prompt_tokens).end_object();
  w.key("timings").begin_object();
  w.field("queue_ms", d.timings.queue_ms).field("ttft_ms", d.timings.ttft_ms).field("total_ms", d.timings.total_ms);
  w.field("preemptions", d.timings.preemptions).end_object();
  w.field("cached", d.cached);
  if (d.cached) w.field("similarity", d.similarity);
  w.end_object();
  return w.take();
}

std::string error_frame(std::string_view id, std::string_view code, std::string_view message) {
  json_writer w;
  w.begin_object().field("type", "error");
  w.key("id");
  if (id.empty()) w.null(); else w.value(id);
  w.field("code", code).field("message", message).end_object();
  return w.take();
}

std::string pong_frame() { return R"({"type":"pong"})"; }

}  // namespace troupe::net

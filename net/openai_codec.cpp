#include "net/openai_codec.hpp"

#include "net/detail/request_reader.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {

namespace dom = simdjson::dom;
using detail::reader;

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

parsed_openai parse_openai_request(std::string_view body, bool chat) {
  parsed_openai out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  openai_request req;
  detail::read_common(r, req.spec);
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
    detail::read_messages(r, req.spec);
    if (!r.err && req.spec.messages.empty()) r.err = bad_request("'messages' is required", "messages");
  } else {
    bool seen = false;
    detail::read_prompt(r, req.spec, seen);
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

}  // namespace troupe::net

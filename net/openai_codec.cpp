#include "net/openai_codec.hpp"

#include <algorithm>
#include <cstring>

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
  } else if (c == "loading" || c == errc::no_replica) {
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

parsed_embedding parse_embedding_request(std::string_view body) {
  parsed_embedding out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  embedding_query q;
  r.str("model", q.model);
  std::string format = "float";
  r.str("encoding_format", format);
  if (!r.err && format != "float" && format != "base64")
    r.err = bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
  q.base64 = format == "base64";
  r.integer("dimensions", q.dimensions);
  if (!r.err && r.get("dimensions") && q.dimensions <= 0)
    r.err = bad_request("'dimensions' must be a positive integer", "dimensions");
  std::string user;
  r.str("user", user);  // accepted and ignored: nothing here is per end user
  auto in = r.get("input");
  if (!r.err && !in) r.err = bad_request("'input' is required", "input");
  if (!r.err && in->is_string()) {
    q.inputs.emplace_back(std::string_view(*in));
    if (q.inputs.back().empty()) r.err = bad_request("'input' must not be empty", "input");
  } else if (!r.err && in->is_array()) {
    dom::array a(*in);
    if (a.size() == 0) r.err = bad_request("'input' must not be an empty array", "input");
    else if (a.size() > max_embedding_inputs)
      r.err = bad_request("'input' has more than " + std::to_string(max_embedding_inputs) + " items", "input");
    size_t i = 0;
    for (dom::element x : a) {
      if (r.err) break;
      const std::string at = "input[" + std::to_string(i++) + "]";
      if (x.is_number() || x.is_array()) {
        // The embedder reads text with its own vocabulary: token ids of another one mean nothing to it.
        r.err = bad_request("'input' as token ids is not supported: send the text (a string or an array of strings)",
                            "input");
      } else if (!x.is_string()) {
        r.wrong(at, "a string", x);
      } else if (std::string_view(x).empty()) {
        r.err = bad_request("'" + at + "' must not be empty", at);
      } else {
        q.inputs.emplace_back(std::string_view(x));
      }
    }
  } else if (!r.err) {
    r.wrong("input", "a string or an array of strings", *in);
  }
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.query = std::move(q);
  return out;
}

namespace {

std::string base64_of_floats(const std::vector<float>& v) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  bytes.reserve(v.size() * 4);
  for (float f : v) {
    uint32_t u;
    static_assert(sizeof u == sizeof f, "float is 32 bits");
    std::memcpy(&u, &f, sizeof u);
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t x = 0;
    for (size_t k = 0; k < 3; ++k) x = (x << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? abc[(x >> (18 - 6 * k)) & 0x3F] : '=');
  }
  return out;
}

}  // namespace

std::string embeddings_json(const embedding_result& r, bool base64) {
  json_writer w;
  w.begin_object().field("object", "list").key("data").begin_array();
  for (size_t i = 0; i < r.vectors.size(); ++i) {
    w.begin_object().field("object", "embedding").field("index", static_cast<int64_t>(i)).key("embedding");
    if (base64) {
      w.value(base64_of_floats(r.vectors[i]));
    } else {
      w.begin_array();
      for (float f : r.vectors[i]) w.value_float32(f);
      w.end_array();
    }
    w.end_object();
  }
  w.end_array().field("model", r.model);
  w.key("usage").begin_object().field("prompt_tokens", r.prompt_tokens).field("total_tokens", r.prompt_tokens);
  w.end_object().end_object();
  return w.take();
}

std::string models_json(const std::string& model_name, int64_t created) {
  json_writer w;
  w.begin_object().field("object", "list").key("data").begin_array();
  w.begin_object().field("id", model_name).field("object", "model").field("created", created);
  w.field("owned_by", "troupe").end_object();
  w.end_array().end_object();
  return w.take();
}

}  // namespace troupe::net

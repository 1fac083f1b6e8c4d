#include "net/ws_protocol.hpp"

#include "net/detail/prompt_reader.hpp"
#include "net/detail/request_reader.hpp"
#include "net/json_writer.hpp"
#include "net/openai_codec.hpp"

namespace troupe::net {

namespace dom = simdjson::dom;

namespace {

// The id may be a string or an integer; it is echoed back as a string. False for another type.
bool read_id(const dom::element& e, std::string& out) {
  if (e.is_string()) out = std::string(std::string_view(e));
  else if (e.is_int64()) out = std::to_string(int64_t(e));
  else if (e.is_uint64()) out = std::to_string(uint64_t(e));
  else return false;
  return true;
}

// The id of a frame refused for a key given twice (parse_object keeps no object then): read
// again from the text, when exactly one top-level `id` is there.
std::string id_of_refused(std::string_view text) {
  thread_local dom::parser parser;  // not request_reader's: that one's DOM is its own business
  dom::object obj;
  if (parser.parse(text.data(), text.size()).get(obj) != simdjson::SUCCESS) return {};
  std::string id;
  int seen = 0;
  for (auto kv : obj)
    if (kv.key == "id" && (++seen > 1 || !read_id(kv.value, id))) return {};
  return id;
}

}  // namespace

parsed_frame parse_client_frame(std::string_view text) {
  parsed_frame out;
  dom::object obj;
  if (!detail::parse_object(text, obj, out.error)) {
    if (out.error.code == "duplicate_key") out.id = id_of_refused(text);
    return out;
  }
  detail::reader r{obj, std::nullopt, {}};
  client_frame f;
  if (auto e = r.get("id"); e && !read_id(*e, f.id)) r.wrong("id", "a string or an integer", *e);
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
    out.refused_generate = true;  // until the frame is read whole (below)
    f.type = frame_type::generate;
    detail::known_fields(r, {TROUPE_COMMON_FIELDS, "type", "id", "messages", "prompt", "resume_key", "tools",
                             "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs"});
    need_id();
    detail::read_common(r, f.spec, 100.0f);  // the sampler's range
    if (r.get("max_completion_tokens")) f.max_tokens_field = "max_completion_tokens";
    f.constraint_field = detail::constraint_field(r);
    // logprobs: each token frame carries its logprob; top_logprobs (0..20) adds the alternatives.
    r.boolean("logprobs", f.spec.logprobs);
    int64_t top = 0;
    r.integer("top_logprobs", top);
    if (!r.err && (top < 0 || top > 20)) r.err = bad_request("'top_logprobs' must be in [0, 20]", "top_logprobs");
    if (!r.err && top > 0 && !f.spec.logprobs)
      r.err = bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    f.spec.sampling.n_logprobs = static_cast<int32_t>(top);
    detail::bypass_cache_for(r, f.spec, f.spec.logprobs, "logprobs");
    detail::read_tools(r, f.spec);
    detail::read_messages(r, f.spec);
    bool seen = false;
    detail::read_prompt(r, f.spec, seen);
    if (!r.err && f.spec.messages.empty() && !seen)
      r.err = bad_request("'generate' needs 'messages' or 'prompt'", "messages");
    if (!r.err && !f.spec.tools.empty() && seen)
      r.err = bad_request("'tools' go with 'messages' (a chat), not 'prompt'", "tools");
    if (!r.err && !f.spec.messages.empty() && seen)
      r.err = bad_request("'generate' takes 'messages' or 'prompt', not both", "prompt");
    f.input_field = seen ? "prompt" : "messages";
    r.str("resume_key", f.resume_key);
    if (!r.err && r.get("resume_key") && (f.resume_key.size() < 16 || f.resume_key.size() > 256))
      r.err = bad_request("'resume_key' must be 16 to 256 bytes (a secret only this client knows)", "resume_key");
  } else if (type == "cancel") {
    f.type = frame_type::cancel;
    detail::known_fields(r, {"type", "id"});
    need_id();
  } else if (type == "resume") {
    f.type = frame_type::resume;
    detail::known_fields(r, {"type", "id", "from_index", "resume_key"});
    need_id();
    r.integer("from_index", f.from_index);
    if (!r.err && f.from_index < -1) r.err = bad_request("'from_index' must be -1 or more", "from_index");
    r.str("resume_key", f.resume_key);
    if (!r.err && f.resume_key.empty())
      r.err = bad_request("'resume' needs the 'resume_key' its 'generate' gave", "resume_key");
  } else if (type == "auth") {
    f.type = frame_type::auth;
    detail::known_fields(r, {"type", "key"});
    r.str("key", f.key);
    if (!r.err && f.key.empty()) r.err = bad_request("'auth' needs a 'key'", "key");
  } else if (type == "ping") {
    f.type = frame_type::ping;
    detail::known_fields(r, {"type", "id"});
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
  out.refused_generate = false;
  out.frame = std::move(f);
  return out;
}

std::string token_frame(std::string_view id, int32_t index, std::string_view text, std::string_view logprobs) {
  json_writer w;
  w.begin_object().field("type", "token").field("id", id).field("index", index).field("text", text).end_object();
  std::string out = w.take();
  if (!logprobs.empty()) {
    out.pop_back();  // the closing brace: the logprob members go inside
    out += ',';
    out += logprobs;
    out += '}';
  }
  return out;
}

std::string token_logprobs_json(std::string_view piece, float logprob,
                                const std::vector<std::pair<std::string, float>>& top, bool with_top) {
  json_writer w;
  w.begin_object().field("token", piece).key("logprob").value_float32(logprob);
  if (with_top) {
    w.key("top_logprobs").begin_array();
    for (const auto& [p, lp] : top) {
      w.begin_object().field("token", p).key("logprob").value_float32(lp).end_object();
    }
    w.end_array();
  }
  w.end_object();
  std::string out = w.take();
  return out.substr(1, out.size() - 2);  // the members, without the braces
}

std::string done_frame(std::string_view id, const actors::done_event& d, const std::vector<actors::tool_call>& calls) {
  json_writer w;
  w.begin_object().field("type", "done").field("id", id).field("finish_reason", d.finish_reason);
  if (!d.text.empty()) w.field("text", d.text);
  w.key("usage").begin_object();
  w.field("prompt_tokens", d.usage.prompt_tokens).field("completion_tokens", d.usage.completion_tokens);
  w.field("cached_prompt_tokens", d.usage.cached_prompt_tokens);
  if (d.usage.speculative_proposed > 0)
    w.key("speculative")
        .begin_object()
        .field("proposed", d.usage.speculative_proposed)
        .field("accepted", d.usage.speculative_accepted)
        .end_object();
  w.end_object();
  w.key("timings").begin_object();
  w.field("queue_ms", d.timings.queue_ms).field("ttft_ms", d.timings.ttft_ms).field("total_ms", d.timings.total_ms);
  w.field("preemptions", d.timings.preemptions).end_object();
  w.field("cached", d.cached);
  if (d.cached) w.field("similarity", d.similarity);
  if (!calls.empty()) {
    w.key("tool_calls").begin_array();
    for (const auto& c : calls) {
      w.begin_object().field("id", c.id).field("type", "function");
      w.key("function").begin_object().field("name", c.name).field("arguments", c.arguments).end_object();
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  return w.take();
}

std::string error_frame(std::string_view id, std::string_view code, std::string_view message,
                        std::string_view param, int64_t retry_after_ms) {
  json_writer w;
  w.begin_object().field("type", "error");
  w.key("id");
  if (id.empty()) w.null(); else w.value(id);
  w.field("code", code).field("message", message);
  w.key("param");
  if (param.empty()) w.null(); else w.value(param);
  if (retry_after_ms > 0) w.field("retry_after_ms", retry_after_ms);
  w.end_object();
  return w.take();
}

std::string error_frame(std::string_view id, const api_error& e) { return error_frame(id, e.code, e.message, e.param); }

std::string pipeline_error_frame(std::string_view id, const actors::error_event& e, std::string_view input_field,
                                 std::string_view max_tokens_field, std::string_view constraint_field) {
  const api_error a = from_pipeline_error(e, input_field, max_tokens_field, constraint_field);
  return error_frame(id, a.code, a.message, a.param, e.retry_after_ms);
}

std::string pong_frame(std::string_view id) {
  json_writer w;
  w.begin_object().field("type", "pong");
  if (!id.empty()) w.field("id", id);
  w.end_object();
  return w.take();
}

}  // namespace troupe::net

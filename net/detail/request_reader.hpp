#pragma once
// Reading a request_spec out of a JSON object, shared by the two codecs: the OpenAI bodies
// (openai_codec.cpp) and the WebSocket `generate` frame (ws_protocol.cpp) take the same
// sampling fields, messages and prompt, and name a wrong field the same way.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "actors/request.hpp"
#include "net/api_error.hpp"

namespace troupe::net::detail {

// Field readers: an absent or null field leaves `out` alone; a wrong type is an error (the
// first one is kept).
struct reader {
  simdjson::dom::object obj;
  std::optional<api_error> err;
  std::string prefix;  // for nested objects' error messages

  std::optional<simdjson::dom::element> get(std::string_view k);
  void wrong(std::string_view k, const char* want, const simdjson::dom::element& e);
  void str(std::string_view k, std::string& out);
  void boolean(std::string_view k, bool& out);
  void number(std::string_view k, double& out);
  template <class F>
  void real(std::string_view k, F& out) {
    double d = out;
    number(k, d);
    out = static_cast<F>(d);
  }
  void integer(std::string_view k, int64_t& out);
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

// Parses `body` (with a parser of this thread) into a JSON object; false with `err` set when it
// is not valid JSON, not an object, or has an object with a key twice anywhere (simdjson's DOM
// keeps both and a lookup finds the first; a proxy that checks the last would be bypassed).
// `obj` lives until this thread parses again.
bool parse_object(std::string_view body, simdjson::dom::object& obj, api_error& err);

// Every key of r.obj must be one of `known`: the first other one is "unknown field 'x'" (a
// field the server does not read must never be a silent no).
void known_fields(reader& r, std::initializer_list<std::string_view> known);
// A field this server knows but does not honour: present (and not null) is a 400 naming it.
void refuse(reader& r, std::string_view k, const std::string& why);

// The fields read_common reads (for known_fields).
#define TROUPE_COMMON_FIELDS                                                                              \
  "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",             \
      "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "priority", "ignore_eos",  \
      "cache", "deadline_ms", "stop", "logit_bias", "response_format", "grammar", "structured_outputs", \
      "guided_json", "guided_regex", "guided_choice", "guided_grammar", "speculative"

// At most 4 stop strings, as OpenAI allows.
inline constexpr size_t max_stop_strings = 4;

// The sampling fields shared by both endpoints and by the WebSocket `generate` frame; a sampled
// request without `seed` (and without `cache: true`) gets a random one. `temperature` above
// max_temperature is a 400 (OpenAI's API: 2; the WebSocket protocol: the sampler's 100).
void read_common(reader& r, actors::request_spec& s, float max_temperature);
// The field that sets the request's output constraint ("response_format", "structured_outputs",
// "grammar", "guided_json", ...; read_common lets only one be there), or "": what a refusal of
// the constraint, compiled later in admission, names as its param.
std::string constraint_field(reader& r);
// A request that asks for what the response cache does not key or keep (logit_bias, logprobs:
// a cached answer would come without them, or biased the other way) is generated afresh:
// `cache` absent becomes false, `cache: true` is a 400 naming `cache`.
void bypass_cache_for(reader& r, actors::request_spec& s, bool asked, const char* field);
// `messages`: each `content` a string or an array of {"type":"text","text":...} parts (another
// part type is refused naming it); roles system, user, assistant (with `tool_calls`, whose
// content may be null, and an answer's null `refusal`, `annotations`, `audio`, `function_call`)
// and tool (with `tool_call_id`).
void read_messages(reader& r, actors::request_spec& s);
// `tools` (type "function" only) and `tool_choice`.
void read_tools(reader& r, actors::request_spec& s);
// `prompt` (one, or a batch): net/detail/prompt_reader.hpp.

}  // namespace troupe::net::detail

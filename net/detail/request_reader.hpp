#pragma once
// Reading a request_spec out of a JSON object, shared by the two codecs: the OpenAI bodies
// (openai_codec.cpp) and the WebSocket `generate` frame (ws_protocol.cpp) take the same
// sampling fields, messages and prompt, and name a wrong field the same way.
#include <cstdint>
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
// is not valid JSON or not an object. `obj` lives until this thread parses again.
bool parse_object(std::string_view body, simdjson::dom::object& obj, api_error& err);

// The sampling fields shared by both endpoints and by the WebSocket `generate` frame.
void read_common(reader& r, actors::request_spec& s);
// `messages`: each `content` a string or an array of {"type":"text","text":...} parts.
void read_messages(reader& r, actors::request_spec& s);
// `prompt`: a string or an array of exactly one string; `seen` when the field is there.
void read_prompt(reader& r, actors::request_spec& s, bool& seen);

}  // namespace troupe::net::detail

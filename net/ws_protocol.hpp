#pragma once
// The WebSocket protocol of /v1/ws (docs/protocol.md), free of sockets and actors so that tests
// drive it directly: client frames (generate, cancel, resume, auth, ping) parsed, server frames
// (token, done, error, pong) written. A `generate` takes the same fields as an OpenAI body and
// is read by the same readers (detail/request_reader.hpp).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "actors/request.hpp"
#include "net/api_error.hpp"

namespace troupe::net {

enum class frame_type { generate, cancel, resume, auth, ping };

struct client_frame {
  frame_type type = frame_type::generate;
  std::string id;               // the client's request id (generate, cancel, resume)
  actors::request_spec spec;    // generate
  int64_t from_index = -1;      // resume: the last index the client saw (-1: from the start)
  // generate: the client's secret for resuming this stream (none: it cannot be resumed);
  // resume: the same secret.
  std::string resume_key;
  std::string key;              // auth
  // generate: how the frame spelt its length cap (`max_tokens`, or `max_completion_tokens`) and
  // which input it gave (`messages` or `prompt`), so that a pipeline error names them as sent.
  std::string max_tokens_field = "max_tokens";
  std::string input_field;
  std::string constraint_field;  // the field that constrains the output, if one does
};

struct parsed_frame {
  std::optional<client_frame> frame;
  api_error error;
  // The frame's id when it could be read, so the error frame can name it: also for a frame
  // refused for a key given twice, unless the key twice is `id`.
  std::string id;
  // A refused frame's `type` was "generate": a request refused (counted as one in /metrics).
  bool refused_generate = false;
};

parsed_frame parse_client_frame(std::string_view text);

// `logprobs`: the token's own members `"logprob":..,"top_logprobs":[..]` (JSON, no braces) when
// the stream asked for them (token_logprobs_json), else empty.
std::string token_frame(std::string_view id, int32_t index, std::string_view text, std::string_view logprobs = {});
// A token's logprob members for its frame: `token` (its text, U+FFFD for a partial UTF-8
// sequence) and `logprob`, and with alternatives asked `top_logprobs` [{token, logprob}].
std::string token_logprobs_json(std::string_view piece, float logprob,
                                const std::vector<std::pair<std::string, float>>& top, bool with_top);
// `calls`: the tool calls read from the reply (a request with tools), as OpenAI shapes them.
std::string done_frame(std::string_view id, const actors::done_event& d,
                       const std::vector<actors::tool_call>& calls = {});
// {"type":"error","id":..,"code":..,"message":..,"param":..}: `id` and `param` (the field at
// fault) are null when empty; `retry_after_ms` (overloaded, rate_limited: when to try again, as
// HTTP's Retry-After) only when set.
std::string error_frame(std::string_view id, std::string_view code, std::string_view message,
                        std::string_view param = {}, int64_t retry_after_ms = 0);
std::string error_frame(std::string_view id, const api_error& e);
// The error frame of a generate's pipeline error (admission's refusals, a prompt over the
// context, ...): the HTTP codec's mapping (from_pipeline_error) gives its `param`, with the
// generate's spelling of max_tokens and its input field (client_frame's).
std::string pipeline_error_frame(std::string_view id, const actors::error_event& e, std::string_view input_field,
                                 std::string_view max_tokens_field, std::string_view constraint_field = {});
// {"type":"pong"}, with the ping's `id` when it had one.
std::string pong_frame(std::string_view id = {});

}  // namespace troupe::net

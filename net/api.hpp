#pragma once
// Wire codecs of the network API, free of sockets and actors so that tests drive them directly:
//   - OpenAI-compatible requests (`/v1/chat/completions`, `/v1/completions`) parsed into a
//     request_spec, and their responses, SSE chunks and error bodies;
//   - the WebSocket protocol of docs/protocol.md: client frames in, server frames out.
// Parsing uses simdjson; writing uses json_writer. A parse failure is an api_error that names
// the field, with the HTTP status it maps to.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.hpp"

namespace troupe::net {

struct api_error {
  int status = 400;
  std::string type = "invalid_request_error";  // OpenAI's error.type
  std::string code;                            // machine-readable (errc names and a few of ours)
  std::string message;
  std::string param;                           // the offending field, when there is one
};

api_error bad_request(std::string message, std::string param = {}, std::string code = "invalid_request");

// The HTTP status and OpenAI error type for a pipeline error code (actors::errc, or "loading").
api_error from_pipeline_error(const actors::error_event& e);

// {"error":{"message":..,"type":..,"code":..,"param":..}}
std::string error_json(const api_error& e);

// ---- OpenAI-compatible HTTP --------------------------------------------------------------

struct openai_request {
  actors::request_spec spec;
  std::string model;            // as the client wrote it (echoed back)
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
};

struct parsed_openai {
  std::optional<openai_request> request;
  api_error error;  // when !request
};

// `chat`: /v1/chat/completions (needs `messages`); otherwise /v1/completions (needs `prompt`).
parsed_openai parse_openai_request(std::string_view body, bool chat);

struct completion_result {
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;
  std::string text;
  std::string finish_reason;
  actors::usage_info usage;
};

std::string chat_completion_json(const completion_result& r);
std::string text_completion_json(const completion_result& r);

// One SSE event: "data: <json>\n\n".
std::string sse_event(std::string_view json);
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

// A streamed chunk. `role_only`: the first chat chunk, carrying {"role":"assistant"}.
// A chunk with `finish_reason` set ends the choice; `usage` adds the usage object (and, for
// the usage-only chunk OpenAI sends with include_usage, `choices` is empty when `no_choices`).
struct chunk_spec {
  std::string_view text;
  bool role_only = false;
  std::string_view finish_reason;
  const actors::usage_info* usage = nullptr;
  bool no_choices = false;
};
std::string chat_chunk_json(const completion_result& head, const chunk_spec& c);
std::string text_chunk_json(const completion_result& head, const chunk_spec& c);

std::string models_json(const std::string& model_name, int64_t created);

// ---- WebSocket protocol (docs/protocol.md) ----------------------------------------------

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
};

struct parsed_frame {
  std::optional<client_frame> frame;
  api_error error;
  std::string id;  // the frame's id when it could be read, so the error frame can name it
};

parsed_frame parse_client_frame(std::string_view text);

std::string token_frame(std::string_view id, int32_t index, std::string_view text);
std::string done_frame(std::string_view id, const actors::done_event& d);
std::string error_frame(std::string_view id, std::string_view code, std::string_view message);
std::string pong_frame();

}  // namespace troupe::net

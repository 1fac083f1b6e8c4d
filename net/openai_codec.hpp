#pragma once
// The OpenAI-compatible HTTP API's codec, free of sockets and actors so that tests drive it
// directly: requests (`/v1/chat/completions`, `/v1/completions`) parsed into a request_spec,
// and their responses, SSE chunks, `/v1/models`, `/v1/embeddings` and error bodies. (The WebSocket protocol is
// ws_protocol.hpp.) Parsing uses simdjson; writing uses json_writer. A parse failure is an
// api_error that names the field, with the HTTP status it maps to.
#include <cstdint>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.hpp"
#include "net/api_error.hpp"

namespace troupe::net {

// The HTTP status and OpenAI error type for a pipeline error code (actors::errc, or "loading").
// `input_field` (`messages` or `prompt`) is the param of a prompt too long for the context. An
// invalid_request whose message starts with a request field ("max_tokens 9000 exceeds this
// server's cap", "top_p must be in (0, 1]": admission's and the sampler's convention) names it as
// the param; `max_tokens` as the client spelt it (`max_tokens_field`: or max_completion_tokens).
// A refusal of the output constraint (admission compiles it: "json_schema: unsupported keyword
// 'if' at /", "regex: ...", "grammar: ...", "choice: ...") names `constraint_field`, the field that
// set it.
api_error from_pipeline_error(const actors::error_event& e, std::string_view input_field = {},
                              std::string_view max_tokens_field = "max_tokens", std::string_view constraint_field = {});

// {"error":{"message":..,"type":..,"code":..,"param":..}}
std::string error_json(const api_error& e);

// One prompt of a /v1/completions batch: its text, or its token ids.
struct prompt_input {
  std::string text;
  std::vector<int32_t> tokens;
};

struct openai_request {
  actors::request_spec spec;
  std::string model;            // as the client wrote it (echoed back)
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  int32_t n = 1;                // choices (1..max_choices), choice i sampled with seed + i
  // /v1/completions: a batch of two or more prompts (else empty: spec's prompt is the one);
  // prompt p's choices are p * n .. p * n + n - 1, as OpenAI numbers them.
  std::vector<prompt_input> batch;
  bool echo = false;            // completions: the prompt before the completion
  // Token logprobs asked (chat `logprobs: true`, completions `logprobs: k`); the alternatives
  // asked are spec.sampling.n_logprobs (chat `top_logprobs`, completions' k).
  bool logprobs = false;
  std::string max_tokens_field = "max_tokens";  // or "max_completion_tokens", as the client sent it
  std::string constraint_field;                 // the field that constrains the output, if one does
};

inline constexpr int32_t max_choices = 16;             // `n`
inline constexpr int32_t max_batch_choices = 128;      // a batch's prompts times `n`
inline constexpr int32_t legacy_completion_default_max_tokens = 16;  // /v1/completions without max_tokens
inline constexpr int32_t max_completion_logprobs = 5;  // completions' `logprobs`, as OpenAI's legacy API

struct parsed_openai {
  std::optional<openai_request> request;
  api_error error;  // when !request
};

// `chat`: /v1/chat/completions (needs `messages`); otherwise /v1/completions (needs `prompt`).
parsed_openai parse_openai_request(std::string_view body, bool chat);

// One generated token's logprob as a response shows it: `piece` is the token's exact bytes
// (possibly part of a UTF-8 sequence: `bytes` shows them, `token` their text with U+FFFD).
struct token_logprob_entry {
  std::string piece;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // the alternatives: piece, logprob
};

class json_writer;
// [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], as chat's logprobs.content and
// the Responses API's output_text.logprobs show them (the writer turns a piece that is not whole
// UTF-8 into U+FFFD, as OpenAI shows it; -9999 stands for an impossible token, as OpenAI's).
void write_token_logprobs(json_writer& w, const std::vector<token_logprob_entry>& entries);

struct choice_result {
  std::string text;
  std::string finish_reason;
  std::vector<token_logprob_entry> logprobs;
  std::vector<actors::tool_call> tool_calls;  // chat: the calls the reply made (content null when no text)
  bool calls_only = false;  // chat: tool_choice forced a call (content null when no text, calls or not)
};

struct completion_result {
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;
  // One choice: `text` and `finish_reason`; several (n > 1): `choices`, in index order.
  std::string text;
  std::string finish_reason;
  std::vector<choice_result> choices;
  bool logprobs = false;          // write each choice's logprobs (else `logprobs: null`)
  int64_t text_offset_base = 0;   // completions' text_offset of the first token (the echoed prompt's length, in characters)
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
// Characters (Unicode code points) in UTF-8 text: the bytes that do not continue a sequence.
// Completions' `text_offset` counts characters, as OpenAI's and vLLM's (Python string indexes).
int64_t utf8_chars(std::string_view text);

struct chunk_spec {
  int32_t index = 0;  // the choice
  std::string_view text;
  // With completion_result::logprobs: this chunk's tokens (may be empty); `text_offset` is the
  // completion text's length before them, in characters (completions).
  const std::vector<token_logprob_entry>* logprobs = nullptr;
  int64_t text_offset = 0;
  bool role_only = false;
  bool calls_only = false;  // with role_only: tool_choice forced a call, so the content is null
  std::string_view finish_reason;
  const actors::usage_info* usage = nullptr;
  bool no_choices = false;
  // Chat: a piece of tool call number `call_index` — its id, type and name in the call's first
  // chunk, then pieces of its arguments' JSON text, as OpenAI streams `delta.tool_calls`.
  int32_t call_index = -1;
  std::string_view call_id;
  std::string_view call_name;
  std::string_view call_arguments;
};
std::string chat_chunk_json(const completion_result& head, const chunk_spec& c);
std::string text_chunk_json(const completion_result& head, const chunk_spec& c);

// GET /v1/models (the list of one) and GET /v1/models/{id} (that one model).
std::string models_json(const std::vector<std::string>& model_names, int64_t created);
std::string model_json(const std::string& model_name, int64_t created);

// POST /v1/embeddings: `input` a string or an array of strings (at most max_embedding_inputs;
// token-id arrays are refused by name), `model`, `encoding_format` ("float" or "base64"),
// `dimensions`; `user` is accepted and ignored. Which models and dimensions exist only the
// pipeline knows (net::inference::embed).
inline constexpr size_t max_embedding_inputs = 2048;

struct embedding_query {
  std::vector<std::string> inputs;
  std::string model;        // as the client wrote it; "" when absent
  int64_t dimensions = 0;   // 0: not asked (the embedder's own)
  bool base64 = false;      // encoding_format "base64"
  // Set by the session: whether nobody waits for the answer any more (the connection is gone). A
  // long list is checked between texts, so a client that left does not hold up the next.
  std::function<bool()> abandoned;
};

struct parsed_embedding {
  std::optional<embedding_query> query;
  api_error error;  // when !query
};
parsed_embedding parse_embedding_request(std::string_view body);

struct embedding_result {
  std::vector<std::vector<float>> vectors;  // one per input, in order
  std::string model;                        // echoed back
  int64_t prompt_tokens = 0;                // the embedder's tokens over all inputs
};

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...]}],"model":..,"usage":{..}};
// with `base64` each embedding is its little-endian float32 bytes in base64, as OpenAI sends it.
std::string embeddings_json(const embedding_result& r, bool base64);

}  // namespace troupe::net

#pragma once
// OpenAI's Responses API (`POST /v1/responses`) read as the chat completion it amounts to: the
// body is translated into a chat-completions body (instructions and input items as messages,
// flat function tools as chat tools, text.format as response_format, max_output_tokens as
// max_completion_tokens) and parsed by parse_openai_request, so that both endpoints validate and
// sample alike; its errors are named back in the Responses API's words. What the response
// object echoes (tools, tool_choice, text.format, metadata...) is kept as the client sent it.
// Free of sockets: tests drive it directly. The answer is responses_assembly.hpp's.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/api_error.hpp"
#include "net/openai_codec.hpp"

namespace troupe::net {

// The Responses API's include entry that asks for the output text's logprobs.
inline constexpr std::string_view include_logprobs = "message.output_text.logprobs";

// What a response object shows of its request (OpenAI echoes these): JSON texts as sent.
struct response_settings {
  std::string model;
  std::string instructions;  // with has_instructions
  bool has_instructions = false;
  std::string tools_json = "[]";
  std::string tool_choice_json = "\"auto\"";
  std::string text_format_json = R"({"type":"text"})";
  std::string metadata_json = "{}";
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> max_output_tokens;
  bool parallel_tool_calls = true;
  int64_t top_logprobs = 0;
  std::string user;  // with has_user
  bool has_user = false;
  std::string prompt_cache_key, safety_identifier;  // "" when not sent (echoed as null)
  std::string previous_response_id;  // "" when none
  bool store = true;
};

struct responses_request {
  openai_request chat;  // the equivalent chat completion (n = 1)
  response_settings settings;
  // The conversation so far as chat messages (JSON objects joined by commas): the previous
  // response's (previous_response_id), then this input; not the instructions, which OpenAI does
  // not carry over to a later response.
  std::string conversation;
  // This request's input items as GET /v1/responses/{id}/input_items lists them (JSON objects,
  // without their ids): a string input is one user message.
  std::vector<std::string> input_items;
};

struct parsed_responses {
  std::optional<responses_request> request;
  api_error error;  // when !request
};

// The conversation stored for an earlier response (responses_request::conversation and its
// answer), by id; nullopt when unknown.
using conversation_lookup = std::function<std::optional<std::string>(const std::string& id)>;

parsed_responses parse_responses_request(std::string_view body, const conversation_lookup& previous);

// A chat-completions field name (an error's param) in the Responses API's words:
// messages[..] -> input, max_completion_tokens -> max_output_tokens, response_format -> text.format,
// tools[i].function.x -> tools[i].x, logprobs -> include.
std::string responses_param(std::string_view chat_param);

// GET /v1/responses/{id}/input_items: `items` (responses_request::input_items) as OpenAI's list
// `{object: "list", data, first_id, last_id, has_more}`, each with an id made from the response's;
// the query's `order` (asc, or desc: the default), `limit` (1..100, default 20) and `after` (an
// item id) are honoured, another parameter is a 400.
struct parsed_item_list {
  std::optional<std::string> json;
  api_error error;  // when !json
};
parsed_item_list input_items_json(const std::string& response_id, const std::vector<std::string>& items,
                                  std::string_view query);

// 404 for a response id that is not stored (never made, deleted, evicted, or made with
// store: false), naming `param` when the id came in a request field.
api_error unknown_response(const std::string& id, std::string param = {});

}  // namespace troupe::net

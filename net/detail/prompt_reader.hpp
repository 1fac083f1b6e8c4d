#pragma once
// A request's `prompt`: one (a string, an array of one string, or token ids, as OpenAI's
// completions take them), or on /v1/completions a batch of several, which OpenAI's legacy API
// and LangChain's OpenAI LLM send: each prompt's n choices are answered in one completion.
#include <vector>

#include "net/detail/request_reader.hpp"
#include "net/openai_codec.hpp"

namespace troupe::net::detail {

// `prompt`: a string, an array of one string, or token ids ([ids] or [[ids]]:
// request_spec::prompt_tokens), not empty; `seen` when the field is there. A batch of several
// prompts is refused (the WebSocket `generate` frame has one).
void read_prompt(reader& r, actors::request_spec& s, bool& seen);

// The same where a batch is served: two or more prompts (strings, or token-id arrays; none empty)
// go to `batch`, and the first to `s` as a single prompt would; one prompt leaves `batch` empty.
void read_prompts(reader& r, actors::request_spec& s, std::vector<prompt_input>& batch, bool& seen);

}  // namespace troupe::net::detail

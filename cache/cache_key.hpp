#pragma once
// What a cached answer is keyed on. The question (the last user message, or a raw prompt) is
// what gets embedded and compared by meaning; everything else that shapes the answer must match
// exactly and goes into the context fingerprint: the model, the system prompt and earlier turns,
// the sampling parameters, max_tokens, stop strings and end-of-generation tokens. So different
// models or personas never share answers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.hpp"
#include "cache/cache_record.hpp"

namespace troupe::cache {

struct cache_query {
  std::string context;            // fingerprinted, never embedded
  std::string question;           // embedded (after normalize_question)
  bool cache_requested = false;   // the request asked for caching explicitly (`cache: true`)

  // The last "user" message is the question; every other message (system prompt, earlier
  // turns, anything after it) is context, with its role.
  static cache_query from_messages(const std::vector<actors::chat_message>& messages, bool cache_requested = false);
  // A raw prompt: all question, no context.
  static cache_query from_prompt(std::string prompt, bool cache_requested = false);
};

// Whitespace runs become one space, leading and trailing whitespace goes. Case and accents are
// kept: the exact path compares this text byte for byte.
std::string normalize_question(std::string_view text);

// Seeds keep the two kinds of fingerprint apart.
fingerprint context_fingerprint(const actors::admitted_request& r, std::string_view context);
fingerprint exact_fingerprint(const fingerprint& context, std::string_view normalized_question);

}  // namespace troupe::cache

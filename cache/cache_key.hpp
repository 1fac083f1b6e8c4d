#pragma once
// What a cached answer is keyed on, and the one place its keys are built. The question (the last
// user message, or a raw prompt) is what gets embedded and compared by meaning; everything else
// that shapes the answer must match exactly and goes into the context key: the model, the system
// prompt and earlier turns, the sampling parameters, max_tokens, stop strings and
// end-of-generation tokens, the output constraint (structured output), and the tenant unless the
// cache is shared across tenants. So different models, personas or tenants never share answers.
// The exact cache keys on the same, with the prompt's tokens in place of the texts.
//
// cache/ knows no actor: the response-cache stage (actors/response_cache/) turns its admitted
// request into a cache_query and its closed stream into a finished_answer.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_choice.hpp"
#include "cache/semantic/cache_record.hpp"
#include "model/sampler.hpp"

namespace troupe::cache {

// One chat message, as the split into question and context reads it.
struct message_view {
  std::string_view role;
  std::string_view content;
};

// What a lookup is given: the request (its id, and everything that shapes its answer) and the
// texts its prompt was rendered from.
struct cache_query {
  uint64_t id = 0;                // a miss is remembered under it until its stream closes
  std::string model;
  std::vector<int32_t> prompt;    // the rendered prompt's token ids: what the exact cache matches
  model::sampling_params sampling;
  int32_t max_tokens = 0;
  std::vector<std::string> stop;  // stop strings
  std::vector<int32_t> eog;       // tokens that end generation (empty with ignore_eos)
  bool logprobs = false;          // each token's logprob is reported
  std::string context;            // fingerprinted, never embedded
  std::string question;           // embedded (after normalize_question); the exact path takes it as it is
  cache_choice cache = cache_choice::automatic;  // the request's `cache` field
  // Whose question it is (the API key's tenant). Part of the key unless share_across_tenants:
  // one tenant's answers are never served to another by default.
  std::string tenant;
  bool share_across_tenants = false;
  // A structured-output constraint (kind and source, e.g. "json_schema" and the schema text);
  // empty kind: none. An answer made under one constraint is no answer under another or none.
  std::string constraint_kind;
  std::string constraint_source;

  // The texts only. The last "user" message is the question; every other message (system
  // prompt, earlier turns, anything after it) is context, with its role.
  static cache_query from_messages(const std::vector<message_view>& messages,
                                   cache_choice cache = cache_choice::automatic);
  // A raw prompt: all question, no context.
  static cache_query from_prompt(std::string prompt, cache_choice cache = cache_choice::automatic);
};

// Whitespace runs become one space, leading and trailing whitespace goes; case and accents are
// kept. What the semantic path embeds and its lexical guards read: the exact path compares the
// question as sent (whitespace is part of a prompt: "is" and "is " are other tokens).
std::string normalize_question(std::string_view text);

// The bytes of everything that shapes an answer besides its question: the model, `context`
// and the request's parameters and limits. Both caches' keys are built on it.
std::string context_key(const cache_query& q, std::string_view context);

// The semantic cache's keys (stored with each record, so their bytes never change). Seeds keep
// the two kinds of fingerprint apart.
fingerprint context_fingerprint(const cache_query& q);
fingerprint exact_fingerprint(const fingerprint& context, std::string_view question);

// The exact cache's key: the context key over the prompt's tokens.
std::string exact_key(const cache_query& q);

}  // namespace troupe::cache

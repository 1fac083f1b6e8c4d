#pragma once
// The values a request and its answer are made of, shared by every actor of the pipeline and
// by the in-process client: what a client submits, and the events it receives back (a token, the
// end of the stream with usage and timings, or an error). All are plain structs with an
// `inspect` overload, so they can cross the network when executors or clients live elsewhere.
//
// Times inside one process are microseconds on the steady clock (`now_us()`); a deadline that
// comes from outside is given relative (`deadline_ms`) and turned into an absolute time at
// admission.
#include <chrono>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "cache/cache_choice.hpp"
#include "model/sampler.hpp"
#include "structured/constraint.hpp"

namespace troupe::model {

// sampling_params belongs to the engine, which knows nothing of CAF; its inspect lives here.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_k, x.top_p, x.min_p,
           x.repetition_penalty, x.frequency_penalty, x.presence_penalty, x.penalty_last_n, x.seed,
           x.n_logprobs, x.logit_bias);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_bias& x) {
  return f(caf::meta::type_name("token_bias"), x.token, x.bias);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  return f(caf::meta::type_name("token_logprob"), x.token, x.logprob);
}

}  // namespace troupe::model

namespace troupe::structured {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, constraint_spec& x) {
  return f(caf::meta::type_name("constraint_spec"), x.kind, x.source);
}

}  // namespace troupe::structured

namespace troupe::actors {

inline int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Why a stream ended (done_event::finish_reason).
namespace finish {
inline constexpr const char* stop = "stop";                   // end-of-generation token or stop string
inline constexpr const char* length = "length";               // max_tokens reached
inline constexpr const char* cancelled = "cancelled";         // the client cancelled or went away
inline constexpr const char* deadline = "deadline";           // the request's deadline passed while running
inline constexpr const char* slow_consumer = "slow_consumer"; // the consumer did not keep up in time
inline constexpr const char* filtered = "filtered";           // an output filter ended the stream (its default)
}  // namespace finish

// Why a request failed (error_event::code).
namespace errc {
inline constexpr const char* invalid_request = "invalid_request";  // bad field; the message names it
inline constexpr const char* unknown_model = "unknown_model";
inline constexpr const char* context_length = "context_length";    // prompt + max_tokens too long
inline constexpr const char* overloaded = "overloaded";            // queue full; see retry_after_ms
inline constexpr const char* rate_limited = "rate_limited";        // tenant over its token bucket
inline constexpr const char* deadline = "deadline";                // deadline passed while queued
inline constexpr const char* kv_capacity = "kv_capacity";          // does not fit the KV memory at all
inline constexpr const char* executor_fault = "executor_fault";    // the model step failed
inline constexpr const char* internal = "internal";                // an actor failed or timed out
inline constexpr const char* timeout = "timeout";                  // the client stopped waiting
inline constexpr const char* no_replica = "no_replica";            // no engine replica is live (a cluster)
}  // namespace errc

// A function call the assistant made (OpenAI `tool_calls[i]`): `arguments` is JSON text.
struct tool_call {
  std::string id;
  std::string name;
  std::string arguments;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_call& x) {
  return f(caf::meta::type_name("tool_call"), x.id, x.name, x.arguments);
}

struct chat_message {
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
  std::vector<tool_call> tool_calls;  // an assistant message's calls
  std::string tool_call_id;           // a "tool" message: the call it answers
  std::string name;                   // a "tool" message: the function's name; others: the participant's (optional)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_message& x) {
  return f(caf::meta::type_name("chat_message"), x.role, x.content, x.tool_calls, x.tool_call_id, x.name);
}

// A function the model may call (OpenAI `tools[i].function`): `parameters` is a JSON Schema text
// ("" when the function takes none).
struct tool_spec {
  std::string name;
  std::string description;
  std::string parameters;
  bool strict = false;  // OpenAI `strict`: the arguments follow `parameters`, also under "auto"
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_spec& x) {
  return f(caf::meta::type_name("tool_spec"), x.name, x.description, x.parameters, x.strict);
}

// OpenAI `tool_choice`.
namespace tool_choice {
inline constexpr const char* automatic = "auto";   // the model decides (default with tools)
inline constexpr const char* none = "none";        // no call: the tools are not offered
inline constexpr const char* required = "required";// at least one call, its arguments constrained
inline constexpr const char* function = "function";// a call of request_spec::tool_choice_name
}  // namespace tool_choice

// What a client asks for. Exactly one of `messages`, `prompt` or `prompt_tokens` is set.
struct request_spec {
  std::string model;                   // empty: the pipeline's model
  std::vector<chat_message> messages;  // rendered with the model's chat template
  std::string prompt;                  // raw text, tokenized as is (special tokens parsed)
  std::vector<int32_t> prompt_tokens;  // already tokenized
  model::sampling_params sampling;
  int32_t max_tokens = 0;              // 0: admission's default
  std::vector<std::string> stop;       // stop strings (not included in the output)
  bool ignore_eos = false;             // keep generating past end-of-generation tokens
  bool logprobs = false;               // report each token's logprob (sampling.n_logprobs adds alternatives)
  int32_t priority = 0;                // higher first, under the `priority` policy
  std::string tenant;                  // rate limits are per tenant; empty = "default"
  int64_t deadline_ms = 0;             // relative to submission; 0: admission's default (or none)
  // The response cache: absent (automatic) caches deterministic answers only; `requested` lets a
  // sampled one be answered from / stored in it too; `refused` bypasses it (greedy ones too).
  cache::cache_choice cache = cache::cache_choice::automatic;
  // Structured output: the sampler only picks tokens that keep the output a valid prefix.
  structured::constraint_spec constraint;
  // Functions the model may call (chat only), rendered into the prompt as the chat template
  // expects; with `required` or `function` the call is constrained to the function's schema.
  std::vector<tool_spec> tools;
  std::string tool_choice = tool_choice::automatic;
  std::string tool_choice_name;        // with tool_choice::function
  bool parallel_tool_calls = true;     // false: at most one call in the reply
  // Speculative decoding: empty for the server's [speculative] method, "off", or a proposer's
  // name (actors/scheduler/speculative/); an unknown name fails the request naming the known ones.
  std::string speculative;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_spec& x) {
  return f(caf::meta::type_name("request_spec"), x.model, x.messages, x.prompt, x.prompt_tokens,
           x.sampling, x.max_tokens, x.stop, x.ignore_eos, x.logprobs, x.priority, x.tenant, x.deadline_ms, x.cache,
           x.constraint, x.tools, x.tool_choice, x.tool_choice_name, x.parallel_tool_calls, x.speculative);
}

struct usage_info {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;    // prompt tokens whose KV came from the prefix cache
  // Speculative decoding: tokens proposed for verification, and those of them accepted.
  int32_t speculative_proposed = 0;
  int32_t speculative_accepted = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_info& x) {
  return f(caf::meta::type_name("usage_info"), x.prompt_tokens, x.completion_tokens, x.cached_prompt_tokens,
           x.speculative_proposed, x.speculative_accepted);
}

struct timing_info {
  double queue_ms = 0;       // admission until the first step that included the request
  double ttft_ms = 0;        // admission until the first token left the streamer
  double total_ms = 0;       // admission until the end
  int32_t preemptions = 0;   // times the request was preempted and recomputed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, timing_info& x) {
  return f(caf::meta::type_name("timing_info"), x.queue_ms, x.ttft_ms, x.total_ms, x.preemptions);
}

// One generated token. `text` is what became printable with it: empty while a UTF-8 sequence
// or a possible stop string is incomplete, and sometimes longer than the token's own piece.
struct token_event {
  uint64_t request_id = 0;
  int32_t index = 0;         // 0-based position in the completion
  int32_t token = -1;
  std::string text;
  float logprob = 0;                      // when request_spec::logprobs (else 0)
  std::vector<model::token_logprob> top;  // when sampling.n_logprobs > 0
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_event& x) {
  return f(caf::meta::type_name("token_event"), x.request_id, x.index, x.token, x.text, x.logprob, x.top);
}

struct done_event {
  uint64_t request_id = 0;
  std::string finish_reason;  // see namespace finish
  std::string text;           // text released at the end (held-back bytes), usually empty
  usage_info usage;
  timing_info timings;
  bool cached = false;        // answered from the response cache
  float similarity = 0;       // when cached: cosine between this question and the cached one (1: exact)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, done_event& x) {
  return f(caf::meta::type_name("done_event"), x.request_id, x.finish_reason, x.text, x.usage, x.timings,
           x.cached, x.similarity);
}

struct error_event {
  uint64_t request_id = 0;    // 0 when the request was rejected before it got an id
  std::string code;           // see namespace errc
  std::string message;        // for a person: what was wrong and what to do
  int64_t retry_after_ms = 0; // for overloaded / rate_limited
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, error_event& x) {
  return f(caf::meta::type_name("error_event"), x.request_id, x.code, x.message, x.retry_after_ms);
}

// What the consumer of a request receives, in order: token_event*, then exactly one done_event
// or error_event. The one event type from the streamer through the client to net/.
using event = std::variant<token_event, done_event, error_event>;

// A request that passed admission, as it travels to the cache and the scheduler.
struct admitted_request {
  uint64_t id = 0;
  std::string model;
  std::vector<int32_t> prompt;       // rendered and tokenized
  model::sampling_params sampling;
  int32_t max_tokens = 0;
  std::vector<std::string> stop;     // stop strings (part of the response-cache key)
  std::vector<int32_t> eog;          // tokens that end generation (empty with ignore_eos)
  bool logprobs = false;             // report each token's logprob
  int32_t priority = 0;
  std::string tenant;
  int64_t arrival_us = 0;            // steady clock, this process
  int64_t deadline_us = 0;           // steady clock, this process; 0: none
  // A continuation after a replica died (actors/router): the last generated_before tokens of
  // `prompt` were generated on another replica and already delivered. They count as completion
  // tokens, and the sampler's draws go on from that position, so the output is the same.
  int32_t generated_before = 0;
  // The text `prompt` was rendered from: the chat messages, or else the raw prompt; both empty
  // for a prompt_tokens request. The response cache keys on it besides the tokens
  // (actors/response_cache/policy.hpp: query_of).
  std::vector<chat_message> messages;
  std::string prompt_text;
  cache::cache_choice cache = cache::cache_choice::automatic;  // request_spec::cache
  // request_spec::constraint, or the tool-call grammar admission made of tools + tool_choice.
  structured::constraint_spec constraint;
  std::string speculative;           // request_spec::speculative
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admitted_request& x) {
  return f(caf::meta::type_name("admitted_request"), x.id, x.model, x.prompt, x.sampling, x.max_tokens, x.stop,
           x.eog, x.logprobs, x.priority, x.tenant, x.arrival_us, x.deadline_us, x.generated_before, x.messages,
           x.prompt_text, x.cache, x.constraint, x.speculative);
}

}  // namespace troupe::actors

#pragma once
// One OpenAI completion (/v1/chat/completions, /v1/completions) assembled from its choices'
// pipeline events, free of sockets so that tests drive it directly: the choices (n > 1 runs n
// requests), logprobs held with their text, tool calls read from the reply, the SSE chunks or the
// whole answer, the usage summed over the choices, and pipeline errors as API errors. The HTTP
// session (http_session.cpp) feeds it each event and writes what the returned step says.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.hpp"
#include "net/answer_assembly.hpp"
#include "net/api_error.hpp"
#include "net/inference.hpp"
#include "net/logprob_cover.hpp"
#include "net/openai_codec.hpp"
#include "structured/tool_calls.hpp"

namespace troupe::net {

// A new id: `prefix` ("chatcmpl-", "cmpl-", "resp_"), this process's random prefix and a count.
std::string new_answer_id(std::string_view prefix);
// A new completion id: "chatcmpl-" (chat) or "cmpl-".
std::string new_completion_id(bool chat);
// The process-unique part of an id new_answer_id made (what follows its `prefix`): the tool-call
// and item ids made from it.
std::string answer_id_suffix(std::string_view id);

// A logit_bias token outside `inf`'s vocabulary, as the 400 that names it; nullopt when none is.
std::optional<api_error> vocabulary_error(const actors::request_spec& spec, const inference& inf);

// A token's logprob as a response shows it: its bytes and the alternatives'.
token_logprob_entry logprob_entry(const inference& inf, const actors::token_event& t);

class completion_assembly : public answer_assembly {
 public:
  // Starts a completion of `req` on `inf` (token pieces, the model's name and tool-call format;
  // it must outlive the completion), with a new id (new_completion_id) and `created` (unix
  // seconds). `chat`: /v1/chat/completions. An error (a logit_bias id outside the vocabulary) is
  // the answer, and nothing starts (no id is taken).
  std::optional<api_error> begin(const openai_request& req, bool chat, int64_t created, const inference& inf);
  // Choice `choice`'s next event (token events, then one done or error event).
  step feed(size_t choice, const actors::event& e) override;
  // A streamed completion's head and role chunks now, before its first token (the session
  // probes a client that closed its side: http_session_completion.cpp, probe_reader); nothing when not
  // streaming, already open or ended. From then on errors go out in the stream.
  step open_stream_now() override;

  // Whether an event of `choice` still counts: a choice cancelled with its siblings may still
  // answer after the completion ended (or after the next request on this connection began).
  bool accepts(size_t choice) const override {
    return !ended_ && choice < choices_.size() && !choices_[choice].ended;
  }
  size_t size() const override { return choices_.size(); }
  actors::request_spec choice_spec(size_t choice, const actors::request_spec& spec) const override;
  bool streaming() const override { return streaming_; }
  bool stream_open() const override { return head_sent_; }  // the SSE head went out (counted as 200)
  bool ended() const override { return ended_; }            // every choice ended (or one failed)
  const completion_result& head() const { return head_; }

 private:
  // One choice of the running completion: its own request (n > 1 runs n of them).
  struct choice_state {
    bool ended = false;
    std::string text;                            // not streamed: the whole text
    std::string finish_reason;
    std::vector<token_logprob_entry> logprobs;   // not streamed: every token's
    // Tokens whose text the streamer still holds back (a possible stop string, an unfinished
    // UTF-8 character): their logprobs go out with that text, or are cut or dropped with it, so
    // that the logprobs cover exactly the text returned.
    logprob_cover held_logprobs;
    int64_t piece_chars = 0;                     // streamed completions: text_offset so far
    actors::usage_info usage;
    // Chat with tools offered: the reply is read for calls (structured/tool_calls.hpp).
    std::optional<structured::tool_call_parser> tool_parser;
  };

  void on_token(step& s, size_t i, const actors::token_event& t);
  void on_final(step& s, size_t i, const actors::event& e);
  void on_error(step& s, const actors::error_event& err);
  void queue_text_chunk(step& s, size_t i, std::string_view text, const std::vector<token_logprob_entry>& lp);
  void stream_tool_deltas(step& s, size_t i, const std::vector<structured::tool_call_parser::delta>& ds,
                          const std::vector<token_logprob_entry>* lp);
  void ensure_head(step& s);
  std::string chunk(const chunk_spec& c) const;
  std::string call_id(size_t choice, size_t call) const;
  actors::usage_info summed_usage() const;
  const std::string& echo_of(size_t choice) const;  // what `echo` puts before the choice's text

  const inference* inf_ = nullptr;
  bool chat_ = true;
  bool streaming_ = false;
  bool include_usage_ = false;
  bool logprobs_ = false;
  std::vector<prompt_input> batch_;              // /v1/completions' batch of prompts (empty: spec's one)
  std::vector<std::string> echoes_;              // completions with `echo`: each prompt's text
  size_t per_prompt_ = 1;                        // choices per prompt (n): prompt p has choices p * n ..
  std::string max_tokens_field_ = "max_tokens";  // as the client spelt it (errors name it so)
  std::string constraint_field_;                 // the field that constrains the output (errors name it)
  completion_result head_;
  std::vector<choice_state> choices_;
  size_t n_ended_ = 0;
  bool others_submitted_ = true;  // choices 1.. submitted (after choice 0's first event)
  bool head_sent_ = false;
  bool ended_ = false;
};

}  // namespace troupe::net

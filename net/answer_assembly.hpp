#pragma once
// What the HTTP session drives while a generated answer runs, whichever API shapes it: the chat
// and legacy completions (completion_assembly.hpp) or the Responses API
// (responses_assembly.hpp). Each is fed the pipeline's events and says, as a step, what the
// session must write; the session (http_session_completion.cpp) only submits and writes.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/request.hpp"
#include "net/api_error.hpp"

namespace troupe::net {

class answer_assembly {
 public:
  // What the session must do after one event, in this order.
  struct step {
    bool submit_others = false;       // submit choices 1..n-1 now (choice 0's first event is in)
    bool cancel = false;              // cancel every choice's request (one failed)
    bool open_stream = false;         // write the SSE stream's head (200) before `events`
    std::vector<std::string> events;  // SSE events (formatted) to queue, in order
    bool end_stream = false;          // the stream ends (after done_line(), when there is one)
    std::optional<std::string> answer;  // the whole JSON answer, with 200
    std::optional<api_error> error;     // answer with this error (nothing was streamed)
    int64_t retry_after_s = 0;          // with `error`: its Retry-After (0: none)
  };

  virtual ~answer_assembly() = default;

  // Choice `choice`'s next event (token events, then one done or error event).
  virtual step feed(size_t choice, const actors::event& e) = 0;
  // A streamed answer's head (and opening events) now, before its first token (the session
  // probes a client that closed its side); nothing when not streaming, already open or ended.
  virtual step open_stream_now() = 0;
  // Whether an event of `choice` still counts (a cancelled choice may still answer late).
  virtual bool accepts(size_t choice) const = 0;
  virtual size_t size() const = 0;          // the choices, each its own request
  // Choice `choice`'s request, made from the answer's `spec`: its own seed (seed + its index among
  // its prompt's choices), and its prompt where the answer has several.
  virtual actors::request_spec choice_spec(size_t choice, const actors::request_spec& spec) const {
    actors::request_spec s = spec;
    s.sampling.seed += choice;
    return s;
  }
  virtual bool streaming() const = 0;
  virtual bool stream_open() const = 0;     // the SSE head went out (counted as 200)
  virtual bool ended() const = 0;           // every choice ended (or one failed)
  // Whether the stream ends with OpenAI's `data: [DONE]` line (chat and completions do; the
  // Responses API's stream ends with its response.completed event).
  virtual bool done_line() const { return true; }

 protected:
  answer_assembly() = default;
  answer_assembly(const answer_assembly&) = default;
  answer_assembly& operator=(const answer_assembly&) = default;
};

}  // namespace troupe::net

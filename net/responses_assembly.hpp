#pragma once
// One Responses API answer (`POST /v1/responses`) assembled from its request's pipeline events,
// free of sockets so that tests drive it directly: the output items (a message with its
// output_text, function calls read from the reply by the tool-call parser), the response object
// or its stream of typed events (response.created ... response.completed, each with its
// sequence_number), and pipeline errors as API errors. One request (the API has no `n`). The
// session (http_session_completion.cpp) feeds it as it feeds completion_assembly.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.hpp"
#include "net/answer_assembly.hpp"
#include "net/inference.hpp"
#include "net/logprob_cover.hpp"
#include "net/openai_codec.hpp"
#include "net/responses_codec.hpp"
#include "structured/tool_calls.hpp"

namespace troupe::net {

// One SSE event of the Responses stream: "event: <type>\ndata: <json>\n\n".
std::string sse_typed_event(std::string_view type, std::string_view json);

class responses_assembly : public answer_assembly {
 public:
  // Starts the answer to `req` on `inf` (token pieces, the model's name and tool-call format; it
  // must outlive the answer), with a new id ("resp_...") and `created` (unix seconds). An error
  // (a logit_bias id outside the vocabulary) is the answer, and nothing starts.
  std::optional<api_error> begin(const responses_request& req, int64_t created, const inference& inf);
  step feed(size_t choice, const actors::event& e) override;
  step open_stream_now() override;
  bool accepts(size_t choice) const override { return !ended_ && choice == 0; }
  size_t size() const override { return 1; }
  bool streaming() const override { return streaming_; }
  bool stream_open() const override { return head_sent_; }
  bool ended() const override { return ended_; }
  bool done_line() const override { return false; }

  const std::string& id() const { return id_; }
  // Ended with a response (completed or incomplete), not an error.
  bool answered() const { return answered_; }
  bool store() const { return settings_.store; }
  // Once answered: the response object (as answered, and as GET /v1/responses/{id} returns it)
  // and the conversation to continue from (the request's, then this answer as chat messages).
  std::string response_json() const { return response_object(false); }
  std::string stored_conversation() const;
  const std::vector<std::string>& input_items() const { return input_items_; }

 private:
  struct call_item {
    std::string item_id;  // "fc_..."
    std::string call_id;  // "call_...", what a function_call_output answers
    std::string name;
    std::string arguments;
    int32_t output_index = 0;
    bool closed = false;  // streamed: its done events are out (the next call started)
  };

  void on_token(step& s, const actors::token_event& t);
  bool call_complete(const call_item& c) const;
  void close_call(step& s, call_item& c);
  void on_done(step& s, const actors::done_event& d);
  void on_error(step& s, const actors::error_event& err);
  void take_text(step& s, std::string_view text, std::vector<token_logprob_entry> lp);
  void take_deltas(step& s, const std::vector<structured::tool_call_parser::delta>& ds,
                   std::vector<token_logprob_entry> lp);
  void open_message(step& s);
  void ensure_head(step& s);
  void close_items(step& s);
  void emit(step& s, std::string_view type, std::string body);
  std::string status() const;  // "in_progress", "completed" or "incomplete"
  std::string response_object(bool in_progress) const;
  std::string message_item(bool done) const;
  std::string call_item_json(const call_item& c, bool done) const;

  const inference* inf_ = nullptr;
  response_settings settings_;
  std::string conversation_;
  std::vector<std::string> input_items_;
  std::string id_;
  std::string message_id_;
  std::string model_;
  int64_t created_ = 0;
  int64_t completed_at_ = 0;  // when the answer ended (unix seconds), shown once it is completed
  bool streaming_ = false;
  bool logprobs_ = false;
  std::string max_tokens_field_ = "max_output_tokens";
  std::string constraint_field_;
  std::optional<structured::tool_call_parser> tool_parser_;
  std::string text_;                          // the message's text
  std::vector<token_logprob_entry> logprobs_all_;  // its tokens' logprobs
  logprob_cover held_;                        // tokens whose text the streamer still holds back
  int32_t message_index_ = -1;                // the message's output_index, once it has one
  std::vector<call_item> calls_;
  int32_t next_index_ = 0;
  int64_t sequence_ = 0;
  std::string finish_reason_;
  actors::usage_info usage_;
  bool head_sent_ = false;
  bool ended_ = false;
  bool answered_ = false;
};

}  // namespace troupe::net

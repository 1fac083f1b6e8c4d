#pragma once
// What the network layer needs from the serving pipeline: submit a request and receive its
// events through a callback, cancel it, and ask whether the model is loaded. The composition
// root (app/serve/serve.cpp, pipeline_inference) implements it over actors::client. The Beast
// sessions see only this and the client's request_handle, a plain value: no actor behaviour is
// compiled with Beast (see CAF-0.17-NOTES: Beast + CAF in one translation unit is slow to build).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/client.hpp"
#include "actors/request.hpp"
#include "net/api_error.hpp"
#include "net/openai_codec.hpp"
#include "net/tokenize_codec.hpp"
#include "structured/tool_calls.hpp"

namespace troupe::net {

class inference {
 public:
  virtual ~inference() = default;
  // The model is loaded and the pipeline runs.
  virtual bool ready() const = 0;
  // The name requests use in their `model` field.
  virtual std::string model_name() const = 0;
  // What GET /v1/models lists (and /v1/models/{id} describes): the served model first, then any
  // other model a request may name (the embedding model of /v1/embeddings).
  virtual std::vector<std::string> listed_models() const { return {model_name()}; }
  // `on_event` runs on a pipeline thread, in order: token events, then one done or error event.
  // It must not block. While not ready, it receives an error_event with code "loading" at once
  // (and the handle is empty). The handle cancels the request: the only way net/ does. With
  // ack_mode::manual, token events count as consumed only once the handle's ack() says so: a
  // reader that falls behind has its sequence paused by the streamer (and ended as
  // slow_consumer after the streamer's timeout) instead of piling up frames in the server.
  virtual actors::request_handle submit(actors::request_spec spec, actors::event_handler on_event,
                                        actors::ack_mode acks = actors::ack_mode::on_handoff) = 0;
  // Extra Prometheus lines about the pipeline (gauges), possibly cached; may be empty.
  virtual std::string pipeline_metrics() const { return {}; }
  // An admin action ("reload", "config"): answers an HTTP status and a JSON body through `done`,
  // from any thread (a reload may wait for a model step). 404 when the action is unknown.
  struct admin_reply {
    int status = 404;
    std::string body;
  };
  virtual void admin(const std::string& action, std::function<void(admin_reply)> done) {
    (void)action;
    done({404, R"({"error":{"message":"no admin actions here","type":"invalid_request_error","code":"not_found"}})"});
  }
  // The bytes token `id` stands for (possibly part of a UTF-8 sequence; "" outside the
  // vocabulary or while loading): logprobs show them.
  virtual std::string token_piece(int32_t id) const {
    (void)id;
    return {};
  }
  // The vocabulary's size, 0 while loading: logit_bias ids are checked against it.
  virtual int32_t vocab_size() const { return 0; }
  // How the model writes tool calls (its chat template's family): replies are read with it.
  virtual structured::tool_format tool_format() const { return structured::tool_format::hermes; }
  // Details for /health as JSON object members (`"cache":{...}`), possibly cached; may be empty.
  virtual std::string health_details() const { return {}; }
  // Calls `then` (on any thread; it must not block) once pipeline_metrics() and
  // health_details() hold figures gathered after this call, or after a short bound when the
  // pipeline is too busy to answer. The default: at once (the figures are always current).
  virtual void fresh_figures(std::function<void()> then) { then(); }
  // Why a loaded server cannot serve a new request now, as /health's status word ("no_replica":
  // every engine replica of a cluster is dead, draining or standing by), or empty when it can.
  // /health then answers 503 with it, so that a load balancer stops sending requests that would
  // all get 503. Possibly cached; it must not block.
  virtual std::string unavailable() const { return {}; }

  // The answer of a request that is not a generation (/tokenize, /detokenize, /v1/embeddings):
  // a value, or the error to answer with (400 naming the field, 404 unknown_model, 503 loading).
  template <class T>
  struct reply {
    std::optional<api_error> error;
    T value;
  };
  // Each runs `done` exactly once, from any thread: the work (tokenizing a MiB, embedding 2048
  // texts) is done off the I/O threads. The defaults answer 404: not served here.
  virtual void tokenize(tokenize_query q, std::function<void(reply<tokenized>)> done) {
    (void)q;
    done({not_served("/tokenize"), {}});
  }
  // Ids outside the vocabulary are a 400 naming `tokens[i]`.
  virtual void detokenize(std::vector<int32_t> tokens, std::function<void(reply<std::string>)> done) {
    (void)tokens;
    done({not_served("/detokenize"), {}});
  }
  // `model` empty or a name the embedder answers to; `dimensions` 0 or the embedder's.
  virtual void embed(embedding_query q, std::function<void(reply<embedding_result>)> done) {
    (void)q;
    done({not_served("/v1/embeddings"), {}});
  }

 protected:
  static api_error not_served(const std::string& what) {
    api_error e = bad_request(what + " is not served here", {}, "not_found");
    e.status = 404;
    return e;
  }
};

// How the reply of `spec` is read for tool calls (HTTP and WebSocket alike): in the model's
// format; forced when tool_choice requires a call (no text is content then); knowing the offered
// functions' names, so that a call of any other is text, not a call. None without tools or with
// tool_choice "none".
inline std::optional<structured::tool_call_parser> tool_parser_for(const inference& inf, const actors::request_spec& spec) {
  if (spec.tools.empty() || spec.tool_choice == actors::tool_choice::none) return std::nullopt;
  std::vector<std::string> names;
  for (const auto& t : spec.tools) names.push_back(t.name);
  const bool forced = spec.tool_choice == actors::tool_choice::required || spec.tool_choice == actors::tool_choice::function;
  return structured::tool_call_parser(inf.tool_format(), forced, spec.tool_choice_name, std::move(names));
}

}  // namespace troupe::net

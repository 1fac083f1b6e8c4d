#pragma once
// What the network layer needs from the serving pipeline, without CAF in sight: submit a
// request and receive its events through a callback, cancel it, and ask whether the model is
// loaded. serve.cpp implements it over actors::client; the Beast sessions only see this.
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "actors/request.hpp"

namespace troupe::net {

using event = std::variant<actors::token_event, actors::done_event, actors::error_event>;

// Cancels the request it belongs to; safe to call from any thread, more than once, after the end.
using cancel_fn = std::function<void()>;
// Acknowledges n token events of a request submitted with manual acks (they were written out).
using ack_fn = std::function<void(int32_t n)>;

struct submission {
  cancel_fn cancel;
  ack_fn ack;  // no-op unless submitted with manual_ack
};

class inference {
 public:
  virtual ~inference() = default;
  // The model is loaded and the pipeline runs.
  virtual bool ready() const = 0;
  // The name requests use in their `model` field.
  virtual std::string model_name() const = 0;
  // `on_event` runs on a pipeline thread, in order: token events, then one done or error event.
  // It must not block. While not ready, it receives an error_event with code "loading" at once.
  // With `manual_ack`, token events count as consumed only once ack() says so: a reader that
  // falls behind has its sequence paused by the streamer (and ended as slow_consumer after the
  // streamer's timeout) instead of piling up frames in the server.
  virtual submission submit(actors::request_spec spec, std::function<void(const event&)> on_event,
                            bool manual_ack = false) = 0;
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
  // Details for /health as JSON object members (`"cache":{...}`), possibly cached; may be empty.
  virtual std::string health_details() const { return {}; }
};

}  // namespace troupe::net

#pragma once
// The in-process client: submit a request to a running pipeline and receive its events. Used by
// the CLI, the tests and the benchmark, and by app/serve (behind net::inference) as the bridge
// between a connection and the actors. Two ways to consume:
//   - pull: submit() returns a stream; next() / wait() take events from it (any thread);
//   - push: submit() with a handler; events are handed to it on an actor thread, in order.
// Either way the events of one request are token_event* then exactly one done_event or
// error_event, and taking a token event acknowledges it to the streamer (flow control: a
// consumer that stops taking events pauses its sequence, and after the streamer's timeout ends
// it with finish_reason slow_consumer).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/request.hpp"

namespace troupe::actors {

class pipeline;
class links_cell;

using event_handler = std::function<void(const event&)>;

// Everything a request produced, collected.
struct completion {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;   // empty when it failed
  usage_info usage;
  timing_info timings;
  bool cached = false;
  float similarity = 0;        // when cached (see done_event)
  error_event error;           // error.code is empty unless it failed
  bool ok() const { return error.code.empty(); }
};

// Adds one event to a completion; true when it was the last.
bool add_event(completion& c, const event& e);

namespace detail {
struct stream_core;
}

class stream {
 public:
  explicit stream(std::shared_ptr<detail::stream_core> core) : core_(std::move(core)) {}
  ~stream();  // cancels a request that has not ended
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  // The request's id: 0 until admission has answered, and when it refused the request.
  uint64_t id() const;
  // The next event, or nothing when `timeout` passes first or the last event was taken.
  std::optional<event> next(std::chrono::milliseconds timeout);
  // Takes the remaining events. If `timeout` passes first the request is cancelled and the
  // completion carries an error with code errc::timeout.
  completion wait(std::chrono::milliseconds timeout = std::chrono::minutes(10));
  // Asks for the end; a done_event with finish_reason "cancelled" follows (unless it ended).
  void cancel();
  // The last event has arrived (it may not have been taken yet).
  bool ended() const;

 private:
  std::shared_ptr<detail::stream_core> core_;
  completion partial_;
};

// For push-style requests: cancels the request. Empty (default-constructed): names no request,
// and cancel() / ack() do nothing.
class request_handle {
 public:
  request_handle() = default;
  explicit request_handle(std::shared_ptr<detail::stream_core> core) : core_(std::move(core)) {}
  explicit operator bool() const { return core_ != nullptr; }
  // Safe from any thread, more than once, after the end.
  void cancel() const;
  uint64_t id() const;
  // With ack_mode::manual: `n` more token events were consumed (e.g. written to the socket).
  void ack(int32_t n = 1) const;

 private:
  std::shared_ptr<detail::stream_core> core_;
};

// Who acknowledges token events in push mode: the hand-off to the handler (auto), or the
// consumer through request_handle::ack once it has really passed them on (manual), so that a
// reader that falls behind pauses its sequence at the streamer instead of piling up events.
enum class ack_mode { on_handoff, manual };

struct client_options {
  int64_t submit_timeout_ms = 10000;  // admission must answer within this
};

class client {
 public:
  explicit client(const pipeline& p, client_options o = {});

  std::unique_ptr<stream> submit(request_spec spec);
  // `on_event` runs on an actor thread: keep it short (hand events on to your own thread or
  // strand). Each call acknowledges its event.
  request_handle submit(request_spec spec, event_handler on_event, ack_mode acks = ack_mode::on_handoff);

 private:
  std::shared_ptr<detail::stream_core> start(request_spec spec, event_handler on_event, ack_mode acks);

  caf::actor_system& sys_;
  std::shared_ptr<const links_cell> cell_;
  client_options opts_;
};

}  // namespace troupe::actors

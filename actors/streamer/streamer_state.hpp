#pragma once
// The streamer's decisions, without CAF: per request, incremental detokenization, stop strings
// (text that could start a stop string is held back), and flow control. Each stream may have
// `buffer_tokens` token events that its consumer has not acknowledged yet; beyond that, events
// wait here and the sequence is paused in the scheduler; it resumes when the consumer has caught
// up to half the buffer. A stream paused for longer than `slow_consumer_timeout_ms` ends with
// finish_reason slow_consumer. Output filters (stream_filter.hpp) see the text after the stop
// strings; each stream gets its chain when it opens. The streamer actor carries out the effects
// this class lists.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/request.hpp"
#include "actors/scheduler/step.hpp"
#include "actors/streamer/filters/stream_filter.hpp"
#include "actors/streamer/streamer.hpp"
#include "actors/text_codec.hpp"
#include "model/stop_matcher.hpp"

namespace troupe::actors {

// What the actor must do after a call; every list in order.
struct streamer_effects {
  std::vector<event> events;                // to each event's consumer (request_id says whose)
  std::vector<uint64_t> pause;              // scheduler: stop scheduling these
  std::vector<uint64_t> resume;             // scheduler: schedule these again
  std::vector<uint64_t> drop;               // scheduler: forget these (stream closed here)
  std::vector<closed_stream> closed;        // admission and cache
  std::vector<std::pair<uint64_t, uint64_t>> slow_checks;  // (id, serial): call check_slow after the timeout
  bool empty() const {
    return events.empty() && pause.empty() && resume.empty() && drop.empty() && closed.empty() && slow_checks.empty();
  }
};

class streamer_state {
 public:
  streamer_state(streamer_config cfg, std::shared_ptr<const text_codec> codec);
  // With the in-process filters already made from cfg.filters (output_filters); a null chain
  // makes every stream fail with `chain_error`.
  streamer_state(streamer_config cfg, std::shared_ptr<const text_codec> codec,
                 std::shared_ptr<const filter_chain_maker> chain, std::string chain_error);

  void open(const stream_open& o);
  bool is_open(uint64_t id) const { return streams_.count(id) != 0; }
  // From the scheduler.
  void on_output(const step_output& o, int64_t now_us);
  // From the cache.
  void on_replay(const cache_replay& r, int64_t now_us);
  // From the consumer: it has taken `n` more token events.
  void on_ack(uint64_t id, int32_t n, int64_t now_us);
  // From the consumer: it wants no more.
  void cancel(uint64_t id, int64_t now_us);
  // The consumer is gone: end quietly.
  void consumer_gone(uint64_t id);
  // A failure for a stream (from admission, the cache, or the actor itself).
  void fail(uint64_t id, const std::string& code, const std::string& message);
  // A failure of the stream's own path (a filter actor stopped): as fail(), and the scheduler
  // drops the sequence.
  void abort(uint64_t id, const std::string& code, const std::string& message);
  // A filter actor ends the stream with `finish_reason`: nothing more is released but the done
  // event, and the sequence is dropped. Ignored once the stream is ending or closed.
  void end_by_filter(uint64_t id, const std::string& finish_reason, int64_t now_us);
  // Fails every open stream.
  void fail_all(const std::string& code, const std::string& message);
  // The timer of a pause fired.
  void check_slow(uint64_t id, uint64_t serial, int64_t now_us);

  // New output filters (already validated) for streams opened from now on.
  void set_filters(std::shared_ptr<const filter_chain_maker> chain, std::vector<filter_spec> specs);

  streamer_effects take_effects();
  streamer_stats stats() const;
  const streamer_config& config() const { return cfg_; }

 private:
  struct stream {
    stream_open info;
    std::unique_ptr<incremental_decoder> dec;
    model::stop_matcher stops;
    int32_t next_index = 0;
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::deque<event> pending;         // waiting for the consumer
    int32_t pending_tokens = 0;
    int32_t unacked = 0;
    bool paused = false;
    uint64_t pause_serial = 0;
    int64_t first_token_us = 0;
    bool from_cache = false;
    float similarity = 0;
    bool ending = false;               // its last event is queued; closes when delivered
    std::string finish_reason;
    std::vector<std::unique_ptr<stream_filter>> filters;  // made when it opened
    bool filter_ended = false;         // a filter ended it: nothing held back is released
    seq_figures so_far;                // the scheduler's figures with its latest token
  };

  void token(stream& s, const token_out& t, int64_t now_us);
  // The done event, with the scheduler's figures (`fig`: its own at the sequence's end, or the
  // last a token brought when the streamer ends the stream itself).
  void end(stream& s, const std::string& reason, const seq_figures& fig, int64_t now_us);
  // Tokens generated but not yet sent are dropped (a cancel, a filter's end, a slow reader): the
  // completion counts the tokens its reader got.
  void drop_pending(stream& s);
  void pump(stream& s);
  void close(uint64_t id, bool delivered_error);
  int32_t buffered(const stream& s) const { return s.unacked + s.pending_tokens; }

  streamer_config cfg_;
  std::shared_ptr<const text_codec> codec_;
  std::shared_ptr<const filter_chain_maker> filters_;  // null when cfg_.filters did not build
  std::string filters_error_;                          // why: such streams fail (never unfiltered)
  std::unordered_map<uint64_t, stream> streams_;
  streamer_effects fx_;
  streamer_stats st_;
};

}  // namespace troupe::actors

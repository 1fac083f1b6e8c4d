#pragma once
// The streamer actor: a thin shell around streamer_state. Admission opens a stream with its
// consumer's event sink; the scheduler sends each step's tokens, the cache sends replays;
// consumers acknowledge what they took and may cancel. It watches each consumer: one that goes
// away has its sequence dropped. Closed streams are reported to admission (with the tokens
// they used) and the cache. A hot reload hands it new output filters in place: it keeps its
// open streams, which keep their filters; streams opened afterwards get the new ones.
#include <cstdint>
#include <string>

#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/event_sink.hpp"
#include "actors/links.hpp"
#include "actors/scheduler/step.hpp"
#include "actors/streamer/filters/filter_actor.hpp"
#include "actors/text_codec.hpp"

namespace troupe::actors {

using output_atom = caf::atom_constant<caf::atom("output")>;
using replay_atom = caf::atom_constant<caf::atom("replay")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using ack_atom = caf::atom_constant<caf::atom("ack")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using slow_atom = caf::atom_constant<caf::atom("slow")>;
using filters_atom = caf::atom_constant<caf::atom("filters")>;
using filter_retire_atom = caf::atom_constant<caf::atom("fretire")>;
using filter_check_atom = caf::atom_constant<caf::atom("fcheck")>;

// What spawn_streamer (and streamer_state) is configured with.
struct streamer_config {
  int32_t buffer_tokens = 64;               // unacknowledged token events per stream; 0: no flow control
  int64_t slow_consumer_timeout_ms = 30000; // paused this long: the stream ends (slow_consumer)
  // A filter actor that holds one of a stream's events this long without passing it on fails
  // the stream, with an error naming it (filter_actor.hpp).
  int64_t filter_timeout_ms = 10000;
  // Output filters, in order, by name in stream_filter_registry(). Hot: a change reaches streams
  // opened afterwards; running streams keep the chain they opened with.
  std::vector<filter_spec> filters;
};

// What admission tells the streamer about a new stream.
struct stream_open {
  uint64_t id = 0;
  int64_t arrival_us = 0;
  int32_t prompt_tokens = 0;
  std::vector<std::string> stop;
  std::string tenant;  // for output filters
  // The markers around a tool call in the reply's format, when it may make calls
  // (filters/repeated_call_guard.hpp: a call repeating an earlier one ends the reply); "": none.
  std::string call_open, call_close;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_open& x) {
  return f(caf::meta::type_name("stream_open"), x.id, x.arrival_us, x.prompt_tokens, x.stop, x.tenant, x.call_open,
           x.call_close);
}

// A response from the cache, to be streamed as if generated.
struct cache_replay {
  uint64_t id = 0;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;
  float similarity = 1.0f;  // cosine between the questions; 1 for an exact match
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_replay& x) {
  return f(caf::meta::type_name("cache_replay"), x.id, x.tokens, x.logprobs, x.finish_reason, x.similarity);
}

// A stream that ended, for admission (queue accounting) and the cache (storing answers).
struct closed_stream {
  uint64_t id = 0;
  std::string finish_reason;        // empty when the request failed
  std::vector<int32_t> tokens;      // the completion's tokens
  std::vector<float> logprobs;
  bool cached = false;              // it was itself a cache replay
  bool filtered = false;            // an output filter ended it: the tokens are no answer to store
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, closed_stream& x) {
  return f(caf::meta::type_name("closed_stream"), x.id, x.finish_reason, x.tokens, x.logprobs, x.cached, x.filtered);
}

struct streamer_stats {
  int32_t open_streams = 0;
  int32_t paused_streams = 0;
  int64_t token_events = 0;
  int64_t streams_closed = 0;
  int64_t slow_consumers = 0;
  int64_t pauses = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, streamer_stats& x) {
  return f(caf::meta::type_name("streamer_stats"), x.open_streams, x.paused_streams, x.token_events,
           x.streams_closed, x.slow_consumers, x.pauses);
}

// New output filters, validated by the supervisor (hot reload; in process only: pointers).
struct filter_update {
  output_filters filters;
  std::vector<filter_spec> specs;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::filter_update)

namespace troupe::actors {

using streamer_actor = caf::typed_actor<
    caf::reacts_to<open_atom, stream_open, event_sink>,
    caf::reacts_to<output_atom, step_output>,
    caf::reacts_to<replay_atom, cache_replay>,
    // Fail one stream, or every open stream when the id is 0 (the scheduler was replaced).
    caf::reacts_to<fail_atom, uint64_t, std::string, std::string>,
    caf::reacts_to<ack_atom, uint64_t, int32_t>,   // the consumer took n token events
    caf::reacts_to<cancel_atom, uint64_t>,
    caf::reacts_to<slow_atom, uint64_t, uint64_t>, // a pause's timer (id, serial)
    caf::replies_to<stats_atom>::with<streamer_stats>,
    caf::replies_to<filters_atom, filter_update>::with<bool>,  // true once in force
    caf::reacts_to<filter_end_atom, uint64_t, std::string>,   // a filter actor ends a stream
    caf::reacts_to<filter_retire_atom, caf::actor>,           // stop a filter actor no stream uses
    // What a filter actor passes on: the streamer is every filter actor's `next`, and relays each
    // event to the next filter actor or the consumer, so it knows how long each one holds it.
    caf::reacts_to<token_event>, caf::reacts_to<done_event>, caf::reacts_to<error_event>,
    caf::reacts_to<filter_check_atom, uint64_t, int32_t>,     // a hop's deadline timer (id, hop)
    caf::reacts_to<links_atom, pipeline_links>>;

streamer_actor spawn_streamer(caf::actor_system& sys, streamer_config cfg, std::shared_ptr<const text_codec> codec);

}  // namespace troupe::actors

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
#include <caf/typed_actor.hpp>

#include "actors/event_sink.hpp"
#include "actors/filter_actor.hpp"
#include "actors/links.hpp"
#include "actors/step.hpp"
#include "actors/streamer_state.hpp"
#include "actors/text_codec.hpp"

namespace troupe::actors {

using open_atom = caf::atom_constant<caf::atom("open")>;
using output_atom = caf::atom_constant<caf::atom("output")>;
using replay_atom = caf::atom_constant<caf::atom("replay")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;
using ack_atom = caf::atom_constant<caf::atom("ack")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using slow_atom = caf::atom_constant<caf::atom("slow")>;
using filters_atom = caf::atom_constant<caf::atom("filters")>;
using filter_retire_atom = caf::atom_constant<caf::atom("fretire")>;

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
    caf::reacts_to<links_atom, pipeline_links>>;

streamer_actor spawn_streamer(caf::actor_system& sys, streamer_config cfg, std::shared_ptr<const text_codec> codec);

}  // namespace troupe::actors

#pragma once
// The scheduler actor: a thin shell around scheduler_state. Requests arrive from the cache
// (enqueue); the streamer tells it to drop, pause or resume sequences; it keeps up to
// max_steps_in_flight plans at the executor (each request with a timeout), applies the answers
// and sends each step's new tokens to the streamer in one message. A failed or timed-out step
// fails the requests that had started and asks the supervisor for a new executor.
#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "actors/executor.hpp"
#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/scheduler_state.hpp"

namespace troupe::actors {

using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using pause_atom = caf::atom_constant<caf::atom("pause")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using executor_atom = caf::atom_constant<caf::atom("executor")>;  // a replacement executor (or none)

using scheduler_actor = caf::typed_actor<
    caf::reacts_to<enqueue_atom, admitted_request>,
    caf::reacts_to<drop_atom, uint64_t>,
    caf::reacts_to<pause_atom, uint64_t>,
    caf::reacts_to<resume_atom, uint64_t>,
    caf::reacts_to<tick_atom>,
    // The executor was replaced (an invalid handle: it could not be; everything fails).
    caf::reacts_to<executor_atom, caf::actor, std::string>,
    caf::replies_to<stats_atom>::with<scheduler_stats>,
    caf::reacts_to<links_atom, pipeline_links>>;

struct scheduler_options {
  scheduler_config config;
  kv_geometry geometry;
  int64_t step_timeout_ms = 120000;  // a step taking longer counts as an executor fault
  int64_t tick_ms = 50;              // deadline checks while sequences wait
};

// The policy name must exist in policy_registry::global() (the pipeline checks it first).
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, executor_actor exec);

}  // namespace troupe::actors

#pragma once
// The scheduler actor: a thin shell around scheduler_state. Requests arrive from the cache
// (enqueue); the streamer tells it to drop, pause or resume sequences; it keeps up to
// max_steps_in_flight plans at the executor (each request with a timeout), applies the answers
// and sends each step's new tokens to the streamer in one message. A failed or timed-out step
// fails the requests that had started and asks the supervisor for a new executor.
//
// Hot swap (a new policy or budgets while serving): the supervisor asks the running scheduler
// for a handover. It stops planning, lets the steps in flight finish and sends their tokens,
// then answers with its whole state (waiting queue, running sequences, block tables) and from
// then on only holds the messages that reach it. The supervisor starts the successor on that
// state, rewires every peer to it and tells the old one where to forward what it held and what
// still arrives; the old one exits a little later. No token is dropped or sent twice: the
// successor continues exactly where the old one stopped.
#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
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

// A scheduler's state on its way to its successor (in process only: it holds a pointer).
struct scheduler_handover {
  std::shared_ptr<scheduler_state> sched;
  caf::actor exec;
  bool exec_ready = false;
  std::string exec_gone;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::scheduler_handover)

namespace troupe::actors {

using scheduler_actor = caf::typed_actor<
    caf::reacts_to<enqueue_atom, admitted_request>,
    caf::reacts_to<drop_atom, uint64_t>,
    caf::reacts_to<pause_atom, uint64_t>,
    caf::reacts_to<resume_atom, uint64_t>,
    caf::reacts_to<tick_atom>,
    // The executor was replaced (an invalid handle: it could not be; everything fails).
    caf::reacts_to<executor_atom, caf::actor, std::string>,
    caf::replies_to<stats_atom>::with<scheduler_stats>,
    caf::reacts_to<links_atom, pipeline_links>,
    caf::replies_to<handover_atom>::with<scheduler_handover>,
    caf::reacts_to<forward_atom, caf::actor>>;

struct scheduler_options {
  scheduler_config config;
  kv_geometry geometry;
  int64_t step_timeout_ms = 120000;  // a step taking longer counts as an executor fault
  int64_t tick_ms = 50;              // deadline checks while sequences wait
};

// The policy name must exist in policy_registry::global() (the pipeline checks it first).
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, executor_actor exec);
// A successor on a predecessor's state, reconfigured with opts.config (its policy must exist).
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, scheduler_handover from);

}  // namespace troupe::actors

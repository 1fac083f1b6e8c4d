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
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/executor/executor.hpp"
#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/scheduler/policy.hpp"
#include "actors/scheduler/speculative/proposer.hpp"
#include "actors/scheduler/step.hpp"

namespace troupe::actors {

using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using pause_atom = caf::atom_constant<caf::atom("pause")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using executor_atom = caf::atom_constant<caf::atom("executor")>;  // a replacement executor (or none)

struct scheduler_config {
  // Tokens fed per step: prompt chunks plus one per decode. A larger budget prefills faster but
  // stalls every decoding stream for longer (on 2 CPU cores a 256-token chunk takes ~1 s).
  int32_t max_batched_tokens = 256;
  int32_t max_num_seqs = 32;         // sequences holding KV memory at once (running or paused)
  bool prefix_caching = true;        // share full KV blocks between requests with equal prefixes
  int32_t max_steps_in_flight = 2;   // 2: plan step N+1 while step N runs; 1: strictly alternate
  std::string policy = "fcfs";       // a name in scheduling_policy_registry()
  policy_options policy_opts;        // that policy's knobs
  speculative_config speculative;    // [speculative]: proposers and when they give up
};

// The shape of the executor's KV memory.
struct kv_geometry {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  int32_t max_positions = 0;  // the model's context: no sequence grows past it; 0: no limit
};

struct scheduler_stats {
  std::string policy;
  int32_t waiting = 0;
  int32_t running = 0;               // holding KV, including paused
  int32_t paused = 0;
  int32_t steps_in_flight = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;        // referenced by a sequence
  int32_t kv_blocks_cached = 0;      // holding a hashed prefix (used or evictable)
  int32_t kv_blocks_available = 0;   // free or evictable; equals total when idle
  int32_t kv_blocks_peak = 0;
  int32_t max_num_seqs = 0;          // the batch size limit in force (an adaptive policy moves it)
  double kv_util_sum = 0;            // sum over steps of used/total (divide by steps)
  int64_t steps = 0;
  int64_t tokens_fed = 0;            // prompt chunk and decode tokens fed to the executor
  int64_t tokens_sampled = 0;
  int64_t prompt_tokens = 0;         // prompt tokens of admitted sequences (first admission)
  int64_t prefix_hit_tokens = 0;     // of those, tokens whose KV came from the prefix cache
  int64_t preemptions = 0;
  int64_t pad_tokens = 0;            // fed for finished members of a dense (static) batch
  int64_t finished = 0;
  int64_t failed = 0;
  int64_t dropped = 0;
  int64_t forward_us = 0;            // sum of the executor's backend time
  int64_t sample_us = 0;
  std::vector<int64_t> batch_hist;   // steps by number of sequences in the step
  int64_t spec_proposed = 0;         // speculative tokens proposed for verification
  int64_t spec_accepted = 0;         // of those, accepted
  int64_t spec_rule_probes = 0;      // speculations let through against the cost rule to re-measure it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduler_stats& x) {
  return f(caf::meta::type_name("scheduler_stats"), x.policy, x.waiting, x.running, x.paused, x.steps_in_flight,
           x.kv_blocks_total, x.kv_blocks_used, x.kv_blocks_cached, x.kv_blocks_available, x.kv_blocks_peak,
           x.max_num_seqs, x.kv_util_sum, x.steps, x.tokens_fed, x.tokens_sampled, x.prompt_tokens,
           x.prefix_hit_tokens, x.preemptions, x.pad_tokens, x.finished, x.failed, x.dropped, x.forward_us,
           x.sample_us, x.batch_hist, x.spec_proposed, x.spec_accepted,
           x.spec_rule_probes);
}

class scheduler_state;

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

// The policy name must exist in scheduling_policy_registry() (the pipeline checks it first).
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, executor_actor exec);
// A successor on a predecessor's state, reconfigured with opts.config (its policy must exist).
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, scheduler_handover from);

}  // namespace troupe::actors

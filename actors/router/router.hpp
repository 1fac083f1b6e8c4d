#pragma once
// The router stage: between the response cache and the engine replicas. A replica is a
// scheduler and an executor with their own model and KV memory: the front's own (id 0, in this
// process) and workers on other hosts (`troupe worker --join`), reached over CAF's network layer.
// The router places each request on a replica by a policy chosen by name (policy.hpp), passes the
// streamer's drop / pause / resume to the replica that holds the request, and passes the
// replicas' step outputs on to the streamer — only from the replica that owns each request, so
// a replica that was declared dead and comes back cannot double-serve. It knows every token it
// has passed on: when a replica dies (its connection drops, or it is silent for
// cluster.dead_after_ms), each of its requests continues on another replica from exactly that
// token (request migration; the sampler's draws are a function of (seed, position), so a seeded
// request's output is unchanged too).
//
// What crosses hosts: admitted_request, the three flow-control ids, step_output, load_report,
// replica_hello / replica_welcome — plain values with `inspect`, registered with CAF
// (actors/runtime.cpp). The per-step scheduler <-> executor exchange never leaves a replica.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/router/policy.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/scheduler/step.hpp"
#include "actors/streamer/streamer.hpp"

namespace troupe::actors {

using join_atom = caf::atom_constant<caf::atom("join")>;      // a worker's replica asks to join
using report_atom = caf::atom_constant<caf::atom("report")>;  // a replica's periodic load report
using drain_atom = caf::atom_constant<caf::atom("drain")>;    // a replica takes no new requests
using route_atom = caf::atom_constant<caf::atom("route")>;    // a new routing policy (hot reload)

// What decides the numbers a replica computes, key -> value as the config names it
// ("model.matmul" -> "fast", "kv.type" -> "f16", "model.weights" -> a digest of the model's
// weights; app/serve/cluster.hpp numerics_of makes it). Replicas that differ in one of them answer
// a greedy request differently, and a request moved from one to the other (migration) would
// change numerics mid-answer: the router refuses a worker whose values differ from the cluster's.
using replica_numerics = std::map<std::string, std::string>;

// The router's settings ([router] and [cluster] in the config file).
struct router_config {
  std::string policy = "least_loaded";  // a name in routing_policy_registry()
  routing_options policy_opts;          // that policy's knobs
  bool use_local = true;                // cluster.local_replica: the front's own replica serves too
  int64_t dead_after_ms = 3000;         // a replica silent this long is dead (no load report)
  int64_t report_ms = 250;              // how often replicas report their load
  std::string secret;                   // cluster.secret: joining workers must prove it; empty: none
  // Not a key: the front's own replica's numerics, which serve fills in (restart-only, so a
  // reload keeps them); empty: unknown, joining workers are compared with each other only.
  replica_numerics numerics;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, routing_options& x) {
  return f(caf::meta::type_name("routing_options"), x.values);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_config& x) {
  return f(caf::meta::type_name("router_config"), x.policy, x.policy_opts, x.use_local, x.dead_after_ms,
           x.report_ms, x.secret, x.numerics);
}

// A replica's load, reported every router_config::report_ms (a replica that stops reporting is
// declared dead after dead_after_ms).
struct load_report {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t kv_blocks_available = 0;
  int32_t kv_blocks_total = 0;
  int32_t max_num_seqs = 0;
  int64_t finished = 0;
  bool draining = false;  // finishing what it has, taking nothing new
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_report& x) {
  return f(caf::meta::type_name("load_report"), x.waiting, x.running, x.kv_blocks_available, x.kv_blocks_total,
           x.max_num_seqs, x.finished, x.draining);
}

// A replica's load as its scheduler reports it.
inline load_report load_of(const scheduler_stats& st, bool draining = false) {
  load_report r;
  r.waiting = st.waiting;
  r.running = st.running;
  r.kv_blocks_available = st.kv_blocks_available;
  r.kv_blocks_total = st.kv_blocks_total;
  r.max_num_seqs = st.max_num_seqs;
  r.finished = st.finished;
  r.draining = draining;
  return r;
}

// A worker's replica introducing itself.
struct replica_hello {
  std::string name;        // for logs and /health (host:pid unless configured)
  std::string model;       // the model it serves: must equal the front's
  int32_t n_vocab = 0;     // and its vocabulary (token ids cross the wire)
  int32_t block_size = 0;
  std::string proof;       // HMAC-SHA256(cluster.secret, nonce) in hex; empty without a secret
  std::string nonce;       // the replica's random nonce for the proof
  replica_numerics numerics;  // must equal the cluster's
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_hello& x) {
  return f(caf::meta::type_name("replica_hello"), x.name, x.model, x.n_vocab, x.block_size, x.proof, x.nonce,
           x.numerics);
}

struct replica_welcome {
  uint64_t id = 0;           // the router's id for this replica (for logs)
  int64_t report_ms = 250;   // how often to report
  std::string error;         // non-empty: refused, and why
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_welcome& x) {
  return f(caf::meta::type_name("replica_welcome"), x.id, x.report_ms, x.error);
}

// One replica as /health and /metrics show it.
struct replica_stats {
  uint64_t id = 0;
  std::string name;
  std::string state;          // "ready", "draining", "dead"; "standby": the front's own with
                              // cluster.local_replica = false
  load_report load;           // its last load report; zero once it is dead
  int32_t in_flight = 0;      // requests the router has placed there and not seen end
  int64_t placed = 0;         // requests placed there, ever (migrated ones included)
  int64_t tokens = 0;         // tokens passed on from it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_stats& x) {
  return f(caf::meta::type_name("replica_stats"), x.id, x.name, x.state, x.load, x.in_flight, x.placed, x.tokens);
}

struct router_stats {
  std::string policy;
  std::vector<replica_stats> replicas;
  int64_t placed = 0;
  int64_t migrations = 0;       // requests moved off a dead replica
  int64_t replica_deaths = 0;
  int64_t refused_no_replica = 0;  // requests failed because no replica was live
  int64_t stale_outputs = 0;    // outputs dropped because they came from a replica that no longer owns the request
  std::string no_replica;       // why no replica can take a new request now; empty when one can
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_stats& x) {
  return f(caf::meta::type_name("router_stats"), x.policy, x.replicas, x.placed, x.migrations, x.replica_deaths,
           x.refused_no_replica, x.stale_outputs, x.no_replica);
}

using router_actor = caf::typed_actor<
    caf::reacts_to<enqueue_atom, admitted_request>,   // from the response cache
    caf::reacts_to<drop_atom, uint64_t>,              // from the streamer
    caf::reacts_to<pause_atom, uint64_t>,
    caf::reacts_to<resume_atom, uint64_t>,
    caf::reacts_to<output_atom, step_output>,         // from a replica's scheduler (or its door)
    caf::replies_to<join_atom, replica_hello>::with<replica_welcome>,
    caf::reacts_to<report_atom, load_report>,
    caf::reacts_to<drain_atom>,                       // from a worker's door: it is leaving
    caf::replies_to<stats_atom>::with<router_stats>,
    caf::reacts_to<links_atom, pipeline_links>,
    caf::replies_to<route_atom, router_config>::with<bool>,  // a new policy; error: keeps the old
    caf::reacts_to<tick_atom>,
    // From the supervisor: the local scheduler crashed and was restarted (why); its requests
    // continue from the tokens already delivered.
    caf::reacts_to<restart_atom, std::string>>;

}  // namespace troupe::actors

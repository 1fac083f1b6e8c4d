#pragma once
// A worker's door to the front: the far end of the router. `troupe worker` runs a pipeline whose
// scheduler and executor are this host's engine replica, with this actor as the scheduler's
// upstream. It joins the front's router (proving the cluster secret), passes the router's
// requests and flow control to its scheduler (turning the request's age and time left back
// into this host's clock), passes the scheduler's outputs up, and reports the replica's load
// every report period — the router's liveness rule. When the link to the front drops, it frees
// every sequence it holds (the front has moved them elsewhere) and waits to join again.
#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/router/router.hpp"

namespace troupe::actors {

using connect_atom = caf::atom_constant<caf::atom("connect")>;

struct door_options {
  std::string name;        // for the front's logs and /health
  std::string model;       // what this replica serves (checked by the front)
  int32_t n_vocab = 0;
  int32_t block_size = 16;
  std::string secret;      // cluster.secret
  replica_numerics numerics;  // what decides its numbers (checked by the front)
};

// What the worker's main loop needs to know.
struct door_status {
  bool connected = false;  // holds a live router handle
  bool joined = false;     // and the router took it
  uint64_t replica_id = 0;
  int32_t in_flight = 0;   // sequences it holds
  bool draining = false;
  std::string refused;     // why the router refused it (the worker stops: retrying cannot help)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, door_status& x) {
  return f(caf::meta::type_name("door_status"), x.connected, x.joined, x.replica_id, x.in_flight, x.draining,
           x.refused);
}

using door_actor = caf::typed_actor<
    caf::reacts_to<enqueue_atom, admitted_request>,  // from the router
    caf::reacts_to<drop_atom, uint64_t>,
    caf::reacts_to<pause_atom, uint64_t>,
    caf::reacts_to<resume_atom, uint64_t>,
    caf::reacts_to<output_atom, step_output>,        // from this replica's scheduler
    caf::reacts_to<links_atom, pipeline_links>,      // this replica's pipeline
    caf::reacts_to<connect_atom, router_actor>,      // the front's router (a remote proxy)
    caf::reacts_to<join_atom>,                       // from the router: not a member (any more)
    caf::reacts_to<drain_atom>,                      // leave: finish what runs, take nothing new
    caf::replies_to<stats_atom>::with<door_status>,
    caf::reacts_to<tick_atom>>;

door_actor spawn_replica_door(caf::actor_system& sys, door_options opts);

}  // namespace troupe::actors

#pragma once
// How the pipeline's actors find each other. The supervisor hands every actor the current
// handles (again after it restarts one), and the client reads them from a shared cell. The
// handles are untyped here so that interface headers need not include each other; each actor
// casts to the typed interface it talks to. Also the atoms every actor understands, and the
// ones several protocols share.
#include <memory>
#include <mutex>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

namespace troupe::actors {

using links_atom = caf::atom_constant<caf::atom("links")>;  // here are your peers
using stats_atom = caf::atom_constant<caf::atom("stats")>;  // report your numbers
// To the supervisor: this actor (handle) failed for this reason; replace it if it is current.
using restart_atom = caf::atom_constant<caf::atom("restart")>;
// Hot reload: give up your state for a successor (and hold what arrives meanwhile) ...
using handover_atom = caf::atom_constant<caf::atom("handover")>;
// ... and here is the successor: pass on what you held and what still comes, then exit.
using forward_atom = caf::atom_constant<caf::atom("forward")>;

// Atoms that several protocols share, defined once here:
// a stream begins (streamer: stream_open; filter actors: filter_open) ...
using open_atom = caf::atom_constant<caf::atom("open")>;
// ... and a stream or request closed (admission and the response cache hear it from the
// streamer; admission actors from admission).
using closed_atom = caf::atom_constant<caf::atom("closed")>;

struct pipeline_links {
  caf::actor admission;
  caf::actor cache;
  caf::actor scheduler;
  caf::actor executor;
  caf::actor streamer;
  caf::actor supervisor;
  // Where requests go after the response cache and where a replica's scheduler sends its step
  // outputs: the router stage on the front; on a worker, its door to the front's router.
  caf::actor router;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_links& x) {
  return f(caf::meta::type_name("pipeline_links"), x.admission, x.cache, x.scheduler, x.executor, x.streamer,
           x.supervisor, x.router);
}

// The current links, readable from any thread; the supervisor writes it.
class links_cell {
 public:
  pipeline_links get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return links_;
  }
  void set(pipeline_links l) {
    std::lock_guard<std::mutex> lock(mu_);
    links_ = std::move(l);
  }

 private:
  mutable std::mutex mu_;
  pipeline_links links_;
};

}  // namespace troupe::actors

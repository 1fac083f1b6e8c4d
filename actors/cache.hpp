#pragma once
// The response-cache actor: every admitted request passes through it. A hit is replayed
// through the streamer; a miss goes on to the scheduler. Closed streams come back from the
// streamer so that finished answers can be stored. This exact_cache sits behind the
// interface; the semantic cache will replace it behind the same messages.
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "actors/exact_cache.hpp"
#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/streamer_state.hpp"

namespace troupe::actors {

using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using closed_atom = caf::atom_constant<caf::atom("closed")>;

using cache_actor = caf::typed_actor<caf::reacts_to<lookup_atom, admitted_request>,
                                     caf::reacts_to<closed_atom, closed_stream>,
                                     caf::replies_to<stats_atom>::with<cache_stats>,
                                     caf::reacts_to<links_atom, pipeline_links>>;

cache_actor spawn_cache(caf::actor_system& sys, cache_config cfg);

}  // namespace troupe::actors

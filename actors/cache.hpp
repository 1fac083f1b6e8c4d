#pragma once
// The response-cache actor: every admitted request passes through it. A hit is replayed
// through the streamer (with the similarity of the match); a miss goes on to the scheduler.
// Closed streams come back from the streamer so that finished answers can be stored. The
// policy behind it (actors/response_cache.hpp: "semantic" or "exact", or a plugin's) is chosen
// by name in the config. It runs on its own thread: a semantic lookup embeds the question.
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/response_cache.hpp"
#include "actors/streamer_state.hpp"
#include "actors/text_codec.hpp"

namespace troupe::actors {

using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using closed_atom = caf::atom_constant<caf::atom("closed")>;

using cache_actor = caf::typed_actor<caf::reacts_to<lookup_atom, admitted_request>,
                                     caf::reacts_to<closed_atom, closed_stream>,
                                     caf::replies_to<stats_atom>::with<cache_stats>,
                                     caf::reacts_to<links_atom, pipeline_links>,
                                     // Hot reload: closes its policy (and store), then forwards.
                                     caf::replies_to<handover_atom>::with<bool>,
                                     caf::reacts_to<forward_atom, caf::actor>>;

// An unknown policy name or a policy that fails to start leaves the actor passing every request
// through (a cache error never fails a request); stats() says why.
cache_actor spawn_cache(caf::actor_system& sys, response_cache_config cfg, std::shared_ptr<const text_codec> codec);

}  // namespace troupe::actors

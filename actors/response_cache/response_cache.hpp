#pragma once
// The response-cache stage's interface: every admitted request passes through its actor. A hit
// is replayed through the streamer (with the similarity of the match); a miss goes on to the
// scheduler. Closed streams come back from the streamer so that finished answers can be stored.
// The policy behind it (actors/response_cache/policy.hpp: "semantic" or "exact", or a plugin's)
// is chosen by name in the config. It runs on its own thread: a semantic lookup embeds the
// question.
#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/streamer/streamer.hpp"
#include "actors/text_codec.hpp"
#include "cache/exact/exact_cache.hpp"
#include "cache/semantic/semantic_cache.hpp"

namespace troupe::actors {

struct response_cache_config {
  bool enabled = true;
  std::string policy = "semantic";        // a name in response_cache_registry()
  // Entries are scoped to the tenant (admitted_request::tenant) unless this is set: then one
  // tenant's answers serve every tenant (the exact and semantic paths alike).
  bool share_across_tenants = false;
  cache::exact_cache_config exact;        // policy "exact"
  cache::semantic_cache_config semantic;  // policy "semantic" (its keys are documented there)
};

// What the stage reports, whichever policy runs it.
struct response_cache_stats {
  int64_t lookups = 0;
  int64_t hits = 0;
  int64_t stores = 0;
  int64_t entries = 0;
  int64_t semantic_hits = 0;  // of the hits, those found by meaning rather than the exact text
  bool enabled = true;
  std::string policy;         // the response cache policy's name
  std::string status;         // why the cache is disabled or degraded; empty when healthy
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, response_cache_stats& x) {
  return f(caf::meta::type_name("response_cache_stats"), x.lookups, x.hits, x.stores, x.entries, x.semantic_hits,
           x.enabled, x.policy, x.status);
}

using lookup_atom = caf::atom_constant<caf::atom("lookup")>;

using cache_actor = caf::typed_actor<caf::reacts_to<lookup_atom, admitted_request>,
                                     caf::reacts_to<closed_atom, closed_stream>,
                                     caf::replies_to<stats_atom>::with<response_cache_stats>,
                                     caf::reacts_to<links_atom, pipeline_links>,
                                     // Hot reload: closes its policy (and store), then forwards.
                                     caf::replies_to<handover_atom>::with<bool>,
                                     caf::reacts_to<forward_atom, caf::actor>>;

// An unknown policy name or a policy that fails to start leaves the actor passing every request
// through (a cache error never fails a request); stats() says why.
cache_actor spawn_cache(caf::actor_system& sys, response_cache_config cfg, std::shared_ptr<const text_codec> codec);

}  // namespace troupe::actors

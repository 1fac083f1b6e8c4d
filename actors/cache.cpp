#include "actors/cache.hpp"

#include <caf/all.hpp>

#include "actors/scheduler.hpp"
#include "actors/streamer.hpp"

namespace troupe::actors {

namespace {

struct cache_actor_state {
  std::unique_ptr<exact_cache> cache;
  pipeline_links links;
  static inline const char* name = "troupe.cache";
};

using self_ptr = cache_actor::stateful_pointer<cache_actor_state>;

cache_actor::behavior_type cache_fn(self_ptr self, cache_config cfg) {
  self->state.cache = std::make_unique<exact_cache>(cfg);
  return {
      [=](lookup_atom, admitted_request& r) {
        auto& st = self->state;
        if (const auto* hit = st.cache->lookup(r)) {
          cache_replay rep;
          rep.id = r.id;
          rep.tokens = hit->tokens;
          rep.logprobs = hit->logprobs;
          rep.finish_reason = hit->finish_reason;
          self->send(caf::actor_cast<streamer_actor>(st.links.streamer), replay_atom::value, std::move(rep));
          return;
        }
        self->send(caf::actor_cast<scheduler_actor>(st.links.scheduler), enqueue_atom::value, std::move(r));
      },
      [=](closed_atom, const closed_stream& c) { self->state.cache->on_closed(c); },
      [=](stats_atom) { return self->state.cache->stats(); },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
  };
}

}  // namespace

cache_actor spawn_cache(caf::actor_system& sys, cache_config cfg) { return sys.spawn(cache_fn, cfg); }

}  // namespace troupe::actors

#include "actors/cache.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/scheduler.hpp"
#include "actors/streamer.hpp"

namespace troupe::actors {

namespace {

struct cache_actor_state {
  std::unique_ptr<response_cache> cache;  // null: disabled, or the policy failed to start
  cache_stats off;                        // what stats() says without one
  pipeline_links links;
  static inline const char* name = "troupe.cache";
};

using self_ptr = cache_actor::stateful_pointer<cache_actor_state>;

std::function<std::string(const std::vector<int32_t>&)> detokenizer(std::shared_ptr<const text_codec> codec) {
  if (!codec) return {};
  return [codec](const std::vector<int32_t>& tokens) {
    auto dec = codec->decoder();
    std::string text;
    for (auto t : tokens) text += dec->push(t);
    return text + dec->flush();
  };
}

cache_actor::behavior_type cache_fn(self_ptr self, response_cache_config cfg, std::shared_ptr<const text_codec> codec) {
  auto& st = self->state;
  st.off.enabled = false;
  st.off.policy = cfg.policy;
  if (!cfg.enabled) {
    st.off.status = "disabled in the config";
  } else if (auto f = response_cache_registry().find(cfg.policy); !f) {
    st.off.status = f.error();
    spdlog::error("troupe: response cache off: {}", st.off.status);
  } else if (auto made = f.value()(cfg, detokenizer(codec)); !made) {
    st.off.status = made.error();
    spdlog::error("troupe: response cache '{}' off: {}", cfg.policy, st.off.status);
  } else {
    st.cache = std::move(made.value());
  }
  return {
      [=](lookup_atom, admitted_request& r) {
        auto& st = self->state;
        if (st.cache) {
          if (auto hit = st.cache->lookup(r)) {
            cache_replay rep;
            rep.id = r.id;
            rep.tokens = std::move(hit->tokens);
            rep.logprobs = std::move(hit->logprobs);
            rep.finish_reason = std::move(hit->finish_reason);
            rep.similarity = hit->similarity;
            self->send(caf::actor_cast<streamer_actor>(st.links.streamer), replay_atom::value, std::move(rep));
            return;
          }
        }
        self->send(caf::actor_cast<scheduler_actor>(st.links.scheduler), enqueue_atom::value, std::move(r));
      },
      [=](closed_atom, const closed_stream& c) {
        if (self->state.cache) self->state.cache->on_closed(c);
      },
      [=](stats_atom) { return self->state.cache ? self->state.cache->stats() : self->state.off; },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
  };
}

}  // namespace

cache_actor spawn_cache(caf::actor_system& sys, response_cache_config cfg, std::shared_ptr<const text_codec> codec) {
  return sys.spawn<caf::detached>(cache_fn, std::move(cfg), std::move(codec));
}

}  // namespace troupe::actors

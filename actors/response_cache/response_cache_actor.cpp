#include "actors/response_cache/response_cache.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/detail/caf_util.hpp"
#include "actors/response_cache/policy.hpp"
#include "actors/supervisor/successor_link.hpp"
#include "actors/router/router.hpp"
#include "actors/streamer/streamer.hpp"

namespace troupe::actors {

namespace {

struct cache_actor_state {
  std::unique_ptr<response_cache> cache;  // null: disabled, or the policy failed to start
  response_cache_stats off;               // what stats() says without one
  pipeline_links links;
  detail::successor_link<cache_actor> next;  // after a handover
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
        if (st.next.handed_over()) {
          st.next.pass([self, r](cache_actor& h) mutable { self->send(h, lookup_atom::value, std::move(r)); });
          return;
        }
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
        self->send(caf::actor_cast<router_actor>(st.links.router), enqueue_atom::value, std::move(r));
      },
      [=](closed_atom, const closed_stream& c) {
        auto& st = self->state;
        if (st.next.handed_over()) {
          st.next.pass([self, c](cache_actor& h) { self->send(h, closed_atom::value, c); });
          return;
        }
        if (st.cache) st.cache->on_closed(c);
      },
      [=](stats_atom) -> caf::result<response_cache_stats> {
        auto& st = self->state;
        if (st.next.successor()) return self->delegate(st.next.successor(), stats_atom::value);
        return st.cache ? st.cache->stats() : st.off;
      },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
      [=](handover_atom) {
        // Closing the policy waits for its queued inserts and releases the store for the
        // successor, which may open the same directory. Misses still in flight here are not
        // stored by the successor (it never saw them): a few answers are not cached, none is lost.
        auto& st = self->state;
        st.cache.reset();
        st.next.hand_over();
        return true;
      },
      [=](forward_atom, caf::actor successor) {
        self->state.next.set(caf::actor_cast<cache_actor>(successor));  // the supervisor retires it later
      },
  };
}

}  // namespace

cache_actor spawn_cache(caf::actor_system& sys, response_cache_config cfg, std::shared_ptr<const text_codec> codec) {
  return sys.spawn<caf::detached>(cache_fn, std::move(cfg), std::move(codec));
}

}  // namespace troupe::actors

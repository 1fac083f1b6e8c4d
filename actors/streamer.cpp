#include "actors/streamer.hpp"

#include <caf/all.hpp>

#include <unordered_map>
#include <unordered_set>

#include "actors/admission.hpp"
#include "actors/cache.hpp"
#include "actors/detail/caf_util.hpp"
#include "actors/scheduler.hpp"

namespace troupe::actors {

namespace {

struct streamer_actor_state {
  std::unique_ptr<streamer_state> streams;
  std::unordered_map<uint64_t, event_sink> sinks;                      // stream -> consumer
  std::unordered_map<caf::actor_addr, std::unordered_set<uint64_t>> by_sink;  // consumer -> streams
  pipeline_links links;
  static inline const char* name = "troupe.streamer";
};

using self_ptr = streamer_actor::stateful_pointer<streamer_actor_state>;

void apply(self_ptr self) {
  auto& st = self->state;
  auto fx = st.streams->take_effects();
  if (fx.empty()) return;
  for (auto& ev : fx.events) {
    std::visit(
        [&](auto& e) {
          auto it = st.sinks.find(e.request_id);
          if (it != st.sinks.end()) self->send(it->second, std::move(e));
        },
        ev);
  }
  auto sched = caf::actor_cast<scheduler_actor>(st.links.scheduler);
  if (sched) {
    for (auto id : fx.pause) self->send(sched, pause_atom::value, id);
    for (auto id : fx.resume) self->send(sched, resume_atom::value, id);
    for (auto id : fx.drop) self->send(sched, drop_atom::value, id);
  }
  auto adm = caf::actor_cast<admission_actor>(st.links.admission);
  auto cache = caf::actor_cast<cache_actor>(st.links.cache);
  for (auto& c : fx.closed) {
    if (auto it = st.sinks.find(c.id); it != st.sinks.end()) {
      auto addr = it->second.address();
      if (auto b = st.by_sink.find(addr); b != st.by_sink.end()) {
        b->second.erase(c.id);
        if (b->second.empty()) {
          self->demonitor(addr);
          st.by_sink.erase(b);
        }
      }
      st.sinks.erase(it);
    }
    if (adm) self->send(adm, closed_atom::value, c.id, static_cast<int32_t>(c.tokens.size()), c.finish_reason);
    if (cache) self->send(cache, closed_atom::value, std::move(c));
  }
  const auto timeout = detail::ms(st.streams->config().slow_consumer_timeout_ms);
  for (auto& [id, serial] : fx.slow_checks) self->delayed_send(self, timeout, slow_atom::value, id, serial);
}

streamer_actor::behavior_type streamer_fn(self_ptr self, streamer_config cfg, std::shared_ptr<const text_codec> codec) {
  self->state.streams = std::make_unique<streamer_state>(cfg, std::move(codec));
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.by_sink.find(dm.source);
    if (it == st.by_sink.end()) return;
    auto ids = it->second;
    for (auto id : ids) st.streams->consumer_gone(id);
    apply(self);
  });
  return {
      [=](open_atom, const stream_open& o, event_sink& sink) {
        auto& st = self->state;
        st.streams->open(o);
        auto& set = st.by_sink[sink.address()];
        if (set.empty()) self->monitor(sink);
        set.insert(o.id);
        st.sinks[o.id] = std::move(sink);
        apply(self);  // a stream whose filters did not build fails at once
      },
      [=](output_atom, const step_output& o) {
        self->state.streams->on_output(o, now_us());
        apply(self);
      },
      [=](replay_atom, const cache_replay& r) {
        self->state.streams->on_replay(r, now_us());
        apply(self);
      },
      [=](fail_atom, uint64_t id, const std::string& code, const std::string& message) {
        if (id == 0)
          self->state.streams->fail_all(code, message);
        else
          self->state.streams->fail(id, code, message);
        apply(self);
      },
      [=](ack_atom, uint64_t id, int32_t n) {
        self->state.streams->on_ack(id, n, now_us());
        apply(self);
      },
      [=](cancel_atom, uint64_t id) {
        self->state.streams->cancel(id, now_us());
        apply(self);
      },
      [=](slow_atom, uint64_t id, uint64_t serial) {
        self->state.streams->check_slow(id, serial, now_us());
        apply(self);
      },
      [=](stats_atom) { return self->state.streams->stats(); },
      [=](filters_atom, filter_update& u) {
        self->state.streams->set_filters(std::move(u.chain), std::move(u.specs));
        return true;
      },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
  };
}

}  // namespace

streamer_actor spawn_streamer(caf::actor_system& sys, streamer_config cfg, std::shared_ptr<const text_codec> codec) {
  return sys.spawn(streamer_fn, cfg, std::move(codec));
}

}  // namespace troupe::actors

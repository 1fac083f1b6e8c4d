#include "actors/streamer/streamer.hpp"

#include <caf/all.hpp>

#include <deque>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "actors/admission/admission.hpp"
#include "actors/response_cache/response_cache.hpp"
#include "actors/detail/caf_util.hpp"
#include "actors/router/router.hpp"
#include "actors/streamer/streamer_state.hpp"

#include <spdlog/spdlog.h>

namespace troupe::actors {

namespace {

// A running filter actor (filter_actor.hpp), shared by the streams opened while it was configured.
struct filter_actor_slot {
  std::string name;
  filter_actor_spawner spawn;
  filter_actor handle;
  std::unordered_set<uint64_t> streams;  // open streams going through it
  bool current = true;                   // part of the filters in force
};
using slot_ptr = std::shared_ptr<filter_actor_slot>;

// An event of a stream inside a filter actor (sent to it, not yet passed on).
struct held_event {
  int32_t index = -1;    // a token event's index; -1 for the last event (done or error)
  int64_t since_us = 0;  // when it was sent to the filter actor, or its deadline restarted
};

// How a stream's events reach its consumer through filter actors. Every filter actor's `next`
// is the streamer, which relays each event it passes on to the next one (or the consumer): so
// it knows which filter actor holds which event since when, and one that holds an event past
// streamer.filter_timeout_ms (it stopped answering without stopping) fails the stream, named,
// instead of stalling it for good. A filter actor passes events on in order, one for one,
// keeping request_id and index: an event it passes on is found in its hop's queue by index.
struct stream_route {
  event_sink consumer;
  std::vector<slot_ptr> chain;             // in order
  std::vector<std::deque<held_event>> held;  // per filter actor, in the order sent
  std::vector<bool> timer_armed;           // per filter actor: a deadline check is pending
};

struct streamer_actor_state {
  std::unique_ptr<streamer_state> streams;
  std::unordered_map<uint64_t, event_sink> sinks;                      // stream -> consumer
  std::unordered_map<caf::actor_addr, std::unordered_set<uint64_t>> by_sink;  // consumer -> streams
  std::vector<slot_ptr> filter_actors;                                 // the configured ones, in order
  std::unordered_map<uint64_t, stream_route> routes;                   // streams going through them
  // Every running filter actor by address; shared with the exit hook that stops them.
  std::shared_ptr<std::unordered_map<caf::actor_addr, slot_ptr>> slots =
      std::make_shared<std::unordered_map<caf::actor_addr, slot_ptr>>();
  pipeline_links links;
  static inline const char* name = "troupe.streamer";
};

using self_ptr = streamer_actor::stateful_pointer<streamer_actor_state>;

void start_filter_actor(self_ptr self, const slot_ptr& slot) {
  slot->handle = slot->spawn(self->system());
  if (!slot->handle) {
    spdlog::error("troupe: filter actor '{}' did not start (its spawner returned no actor)", slot->name);
    return;
  }
  self->monitor(slot->handle);
  (*self->state.slots)[slot->handle.address()] = slot;
}

void set_filter_actors(self_ptr self, std::vector<filter_actor_part> parts) {
  auto& st = self->state;
  for (auto& old : st.filter_actors) {
    old->current = false;
    if (old->streams.empty() && old->handle) {
      self->demonitor(old->handle.address());
      st.slots->erase(old->handle.address());
      // After the events already sent to it (a grace period, as for replaced actors).
      self->delayed_send(self, std::chrono::seconds(1), filter_retire_atom::value, caf::actor_cast<caf::actor>(old->handle));
    }
  }
  st.filter_actors.clear();
  for (auto& p : parts) {
    auto slot = std::make_shared<filter_actor_slot>();
    slot->name = std::move(p.name);
    slot->spawn = std::move(p.spawn);
    start_filter_actor(self, slot);
    st.filter_actors.push_back(std::move(slot));
  }
}

// The stream no longer goes through its filter actors (what they pass on for it from now on is
// dropped); those of an old config stop once unused.
void release_route(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto it = st.routes.find(id);
  if (it == st.routes.end()) return;
  for (auto& slot : it->second.chain) {
    slot->streams.erase(id);
    if (!slot->current && slot->streams.empty() && slot->handle && st.slots->count(slot->handle.address())) {
      self->demonitor(slot->handle.address());
      st.slots->erase(slot->handle.address());
      self->delayed_send(self, std::chrono::seconds(1), filter_retire_atom::value, caf::actor_cast<caf::actor>(slot->handle));
    }
  }
  st.routes.erase(it);
}

// Opens the stream at each filter actor, last first, so each knows where its events go next.
void route_through_filter_actors(self_ptr self, const stream_open& o, event_sink sink) {
  auto& st = self->state;
  if (st.filter_actors.empty() || !st.streams->is_open(o.id)) return;
  for (const auto& slot : st.filter_actors)
    if (!slot->handle) {
      st.streams->abort(o.id, errc::internal, "output filter actor '" + slot->name + "' is not running");
      return;
    }
  stream_route r;
  r.consumer = std::move(sink);
  for (const auto& slot : st.filter_actors) {
    self->send(slot->handle, open_atom::value,
               filter_open{filter_context{o.id, o.tenant, o.prompt_tokens}, caf::actor_cast<event_sink>(self),
                           caf::actor_cast<filter_end_sink>(self)});
    slot->streams.insert(o.id);
  }
  r.chain = st.filter_actors;
  r.held.resize(r.chain.size());
  r.timer_armed.assign(r.chain.size(), false);
  st.routes.emplace(o.id, std::move(r));
}

void apply(self_ptr self);

int32_t held_index(const token_event& e) { return e.index; }
int32_t held_index(const done_event&) { return -1; }
int32_t held_index(const error_event&) { return -1; }

// Sends a stream's event to filter actor `hop` of its route, with a deadline.
template <class Event>
void send_to_hop(self_ptr self, uint64_t id, stream_route& r, size_t hop, Event&& e) {
  auto& q = r.held[hop];
  q.push_back(held_event{held_index(e), now_us()});
  if (!r.timer_armed[hop]) {
    r.timer_armed[hop] = true;
    self->delayed_send(self, detail::ms(self->state.streams->config().filter_timeout_ms), filter_check_atom::value, id,
                       static_cast<int32_t>(hop));
  }
  self->send(r.chain[hop]->handle, std::forward<Event>(e));
}

// The stream cannot go on through its filter actors (one stopped, or stopped answering): its
// consumer hears `why` (directly: not through the filter actors), the filter actors forget it,
// and, if it is still generating, its sequence is dropped.
void fail_route(self_ptr self, uint64_t id, const std::string& why) {
  auto& st = self->state;
  auto it = st.routes.find(id);
  if (it == st.routes.end()) return;
  auto consumer = it->second.consumer;
  for (const auto& slot : it->second.chain)
    if (slot->handle) self->send(slot->handle, error_event{id, errc::internal, why, 0});
  release_route(self, id);
  if (st.streams->is_open(id)) {
    st.streams->abort(id, errc::internal, why + "; the stream cannot go on");  // its error goes to st.sinks
  } else {
    // Its last event was inside the filter actors: the stream is closed here already.
    self->send(consumer, error_event{id, errc::internal, why + "; the stream cannot go on", 0});
  }
}

// An event a filter actor passed on (its `next` is the streamer): to the next one, or the consumer.
template <class Event>
void relay(self_ptr self, Event&& e) {
  auto& st = self->state;
  const uint64_t id = e.request_id;
  auto it = st.routes.find(id);
  if (it == st.routes.end()) return;  // the stream failed, or its consumer went away
  auto& r = it->second;
  const int32_t key = held_index(e);
  // The filter actor that held it. An event is held by one filter actor at a time; those queued
  // before it at that one were dropped by it (it ended the stream).
  size_t hop = r.held.size();
  for (size_t h = 0; h < r.held.size() && hop == r.held.size(); ++h)
    for (size_t i = 0; i < r.held[h].size(); ++i)
      if (r.held[h][i].index == key) {
        r.held[h].erase(r.held[h].begin(), r.held[h].begin() + static_cast<std::ptrdiff_t>(i) + 1);
        hop = h;
        break;
      }
  if (hop == r.held.size()) {
    spdlog::warn("troupe: a filter actor passed on an event of stream {} it was not given (index {}); dropped", id, key);
    return;
  }
  const bool last = key < 0;
  if (hop + 1 < r.chain.size()) {
    send_to_hop(self, id, r, hop + 1, std::forward<Event>(e));
    return;
  }
  self->send(r.consumer, std::forward<Event>(e));
  if (last) release_route(self, id);
}

// A hop's deadline timer: the oldest event the filter actor holds, held past the timeout, fails
// the stream; otherwise the timer is set again for it.
void check_hop(self_ptr self, uint64_t id, int32_t hop) {
  auto& st = self->state;
  auto it = st.routes.find(id);
  if (it == st.routes.end() || hop < 0 || static_cast<size_t>(hop) >= it->second.held.size()) return;
  auto& r = it->second;
  r.timer_armed[hop] = false;
  auto& q = r.held[hop];
  if (q.empty()) return;
  const int64_t timeout_ms = st.streams->config().filter_timeout_ms;
  const int64_t held_ms = (now_us() - q.front().since_us) / 1000;
  if (held_ms < timeout_ms) {
    r.timer_armed[hop] = true;
    self->delayed_send(self, detail::ms(timeout_ms - held_ms), filter_check_atom::value, id, hop);
    return;
  }
  const std::string why = "output filter actor '" + r.chain[hop]->name + "' passed nothing on for " +
                          std::to_string(held_ms) + " ms (streamer.filter_timeout_ms = " + std::to_string(timeout_ms) +
                          ")";
  spdlog::error("troupe: {}; stream {} fails", why, id);
  fail_route(self, id, why);
  apply(self);
}

void apply(self_ptr self) {
  auto& st = self->state;
  auto fx = st.streams->take_effects();
  if (fx.empty()) return;
  // Closed streams are reported to admission and the cache before their consumers hear the
  // end: a client that asks the same again at once finds the answer cached and its slot free.
  std::vector<uint64_t> closed_ids;
  auto adm = caf::actor_cast<admission_actor>(st.links.admission);
  auto cache = caf::actor_cast<cache_actor>(st.links.cache);
  for (auto& c : fx.closed) {
    closed_ids.push_back(c.id);
    if (adm) self->send(adm, closed_atom::value, c.id, static_cast<int32_t>(c.tokens.size()), c.finish_reason);
    if (cache) self->send(cache, closed_atom::value, std::move(c));
  }
  std::unordered_set<uint64_t> ended;  // streams whose last event went out now
  for (auto& ev : fx.events) {
    std::visit(
        [&](auto& e) {
          using event_type = std::decay_t<decltype(e)>;
          if (!std::is_same<event_type, token_event>::value) ended.insert(e.request_id);
          if (auto r = st.routes.find(e.request_id); r != st.routes.end()) {
            send_to_hop(self, e.request_id, r->second, 0, std::move(e));
            return;
          }
          auto it = st.sinks.find(e.request_id);
          if (it != st.sinks.end()) self->send(it->second, std::move(e));
        },
        ev);
  }
  // Flow control goes to the router, which passes it to the replica that holds the request.
  auto router = caf::actor_cast<router_actor>(st.links.router);
  if (router) {
    for (auto id : fx.pause) self->send(router, pause_atom::value, id);
    for (auto id : fx.resume) self->send(router, resume_atom::value, id);
    for (auto id : fx.drop) self->send(router, drop_atom::value, id);
  }
  for (const auto id : closed_ids) {
    if (auto r = st.routes.find(id); r != st.routes.end()) {
      // Closed without a last event (its consumer went away): the filter actors forget it too.
      // Otherwise the route stays until its last event leaves the last filter actor (relay).
      if (!ended.count(id)) {
        for (const auto& slot : r->second.chain)
          if (slot->handle) self->send(slot->handle, error_event{id, errc::internal, "the stream's consumer went away", 0});
        release_route(self, id);
      }
    }
    if (auto it = st.sinks.find(id); it != st.sinks.end()) {
      auto addr = it->second.address();
      if (auto b = st.by_sink.find(addr); b != st.by_sink.end()) {
        b->second.erase(id);
        if (b->second.empty()) {
          self->demonitor(addr);
          st.by_sink.erase(b);
        }
      }
      st.sinks.erase(it);
    }
  }
  const auto timeout = detail::ms(st.streams->config().slow_consumer_timeout_ms);
  for (auto& [id, serial] : fx.slow_checks) self->delayed_send(self, timeout, slow_atom::value, id, serial);
}

// A filter actor stopped: its streams fail (their consumers hear it directly); a configured one
// is started again for the streams that follow.
void filter_actor_down(self_ptr self, const slot_ptr& slot, const caf::error& reason) {
  auto& st = self->state;
  st.slots->erase(slot->handle.address());
  const std::string why = "output filter actor '" + slot->name + "' stopped (" + detail::describe(reason) + ")";
  spdlog::error("troupe: {}; {} stream(s) through it fail", why, slot->streams.size());
  const std::vector<uint64_t> ids(slot->streams.begin(), slot->streams.end());
  for (auto id : ids) fail_route(self, id, why);
  slot->handle = nullptr;
  if (slot->current) start_filter_actor(self, slot);
  apply(self);
}

streamer_actor::behavior_type streamer_fn(self_ptr self, streamer_config cfg, std::shared_ptr<const text_codec> codec) {
  auto filters = output_filters::make(cfg.filters);
  if (filters) {
    self->state.streams = std::make_unique<streamer_state>(cfg, std::move(codec), filters->in_process, std::string());
    set_filter_actors(self, std::move(filters->actors));
  } else {
    self->state.streams = std::make_unique<streamer_state>(cfg, std::move(codec), nullptr, filters.error());
  }
  self->attach_functor([slots = self->state.slots] {
    for (auto& [addr, slot] : *slots)
      if (slot->handle) caf::anon_send_exit(slot->handle, caf::exit_reason::user_shutdown);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (auto sl = st.slots->find(dm.source); sl != st.slots->end()) {
      auto slot = sl->second;
      return filter_actor_down(self, slot, dm.reason);
    }
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
        st.sinks[o.id] = sink;
        route_through_filter_actors(self, o, std::move(sink));
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
        self->state.streams->set_filters(std::move(u.filters.in_process), std::move(u.specs));
        set_filter_actors(self, std::move(u.filters.actors));
        return true;
      },
      [=](filter_end_atom, uint64_t id, const std::string& finish_reason) {
        // The filter actor that ended it drops the events it holds and those still to come but
        // the last: those are released from the queues when the last event passes it, which
        // gets a full deadline to reach it from here (so do the events already in the chain).
        if (auto r = self->state.routes.find(id); r != self->state.routes.end())
          for (auto& q : r->second.held)
            for (auto& h : q) h.since_us = now_us();
        self->state.streams->end_by_filter(id, finish_reason, now_us());
        apply(self);
      },
      [=](filter_retire_atom, const caf::actor& a) { caf::anon_send_exit(a, caf::exit_reason::user_shutdown); },
      [=](token_event& e) { relay(self, std::move(e)); },
      [=](done_event& e) { relay(self, std::move(e)); },
      [=](error_event& e) { relay(self, std::move(e)); },
      [=](filter_check_atom, uint64_t id, int32_t hop) { check_hop(self, id, hop); },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
  };
}

}  // namespace

streamer_actor spawn_streamer(caf::actor_system& sys, streamer_config cfg, std::shared_ptr<const text_codec> codec) {
  return sys.spawn(streamer_fn, cfg, std::move(codec));
}

}  // namespace troupe::actors

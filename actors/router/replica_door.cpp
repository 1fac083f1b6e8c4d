#include "actors/router/replica_door.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <unordered_set>

#include "actors/detail/caf_util.hpp"
#include "actors/router/cluster_auth.hpp"

namespace troupe::actors {

namespace {

struct door_state {
  door_options opts;
  pipeline_links links;          // this replica's pipeline
  router_actor router;           // the front's router, while connected
  door_status status;
  int64_t report_ms = 250;
  std::unordered_set<uint64_t> held;  // requests its scheduler holds for the front
  static inline const char* name = "troupe.replica_door";
};

using self_ptr = door_actor::stateful_pointer<door_state>;

scheduler_actor scheduler_of(self_ptr self) { return caf::actor_cast<scheduler_actor>(self->state.links.scheduler); }

// The front no longer counts on what runs here: free it all.
void release_all(self_ptr self, const char* why) {
  auto& s = self->state;
  if (!s.held.empty()) spdlog::warn("troupe: worker: dropping {} request(s): {}", s.held.size(), why);
  if (auto sched = scheduler_of(self))
    for (auto id : s.held) self->send(sched, drop_atom::value, id);
  s.held.clear();
  s.status.in_flight = 0;
}

void join(self_ptr self) {
  auto& s = self->state;
  if (!s.status.connected) return;
  replica_hello h;
  h.name = s.opts.name;
  h.model = s.opts.model;
  h.n_vocab = s.opts.n_vocab;
  h.block_size = s.opts.block_size;
  h.numerics = s.opts.numerics;
  if (!s.opts.secret.empty()) {
    h.nonce = make_nonce(wall_clock_s());
    h.proof = make_proof(s.opts.secret, h.nonce);
  }
  self->request(s.router, std::chrono::seconds(10), join_atom::value, std::move(h))
      .then(
          [self](const replica_welcome& w) {
            auto& s = self->state;
            if (!w.error.empty()) {
              spdlog::error("troupe: worker: the front refused this worker: {}", w.error);
              s.status.refused = w.error;
              return;
            }
            s.status.joined = true;
            s.status.replica_id = w.id;
            s.report_ms = w.report_ms > 0 ? w.report_ms : 250;
            spdlog::info("troupe: worker: joined the front as replica {}", w.id);
            if (s.status.draining) self->send(s.router, drain_atom::value);
          },
          [self](const caf::error& e) {
            spdlog::warn("troupe: worker: joining the front failed: {}", detail::describe(e));
            // The main loop connects again.
            self->state.status.connected = false;
            self->state.router = router_actor{};
          });
}

door_actor::behavior_type door_fn(self_ptr self, door_options opts) {
  self->state.opts = std::move(opts);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    if (!s.router || dm.source != s.router.address()) return;
    spdlog::warn("troupe: worker: lost the front ({})", detail::describe(dm.reason));
    s.router = router_actor{};
    s.status.connected = false;
    s.status.joined = false;
    release_all(self, "the link to the front is down (it moves them to another replica)");
  });
  self->send(self, tick_atom::value);
  return {
      [=](enqueue_atom, admitted_request& r) {
        auto& s = self->state;
        if (!s.status.joined) return;
        // The front sent the request's age and its time left (see router_actor.cpp).
        const int64_t now = now_us();
        r.arrival_us = now - r.arrival_us;
        if (r.deadline_us > 0) r.deadline_us = now + r.deadline_us;
        s.held.insert(r.id);
        s.status.in_flight = static_cast<int32_t>(s.held.size());
        if (auto sched = scheduler_of(self)) self->send(sched, enqueue_atom::value, std::move(r));
      },
      [=](drop_atom, uint64_t id) {
        auto& s = self->state;
        s.held.erase(id);
        s.status.in_flight = static_cast<int32_t>(s.held.size());
        if (auto sched = scheduler_of(self)) self->send(sched, drop_atom::value, id);
      },
      [=](pause_atom, uint64_t id) {
        if (auto sched = scheduler_of(self)) self->send(sched, pause_atom::value, id);
      },
      [=](resume_atom, uint64_t id) {
        if (auto sched = scheduler_of(self)) self->send(sched, resume_atom::value, id);
      },
      [=](output_atom, step_output& o) {
        auto& s = self->state;
        for (const auto& f : o.finished) s.held.erase(f.id);
        for (const auto& f : o.failed) s.held.erase(f.id);
        s.status.in_flight = static_cast<int32_t>(s.held.size());
        if (s.router && s.status.joined) {
          self->send(s.router, output_atom::value, std::move(o));
        } else if (auto sched = scheduler_of(self)) {
          // Nobody to deliver to: the front has moved these requests elsewhere.
          for (const auto& t : o.tokens) {
            if (s.held.erase(t.id)) self->send(sched, drop_atom::value, t.id);
          }
          s.status.in_flight = static_cast<int32_t>(s.held.size());
        }
      },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
      [=](connect_atom, router_actor& r) {
        auto& s = self->state;
        if (s.router) self->demonitor(s.router.address());
        s.router = std::move(r);
        s.status.connected = true;
        s.status.joined = false;
        self->monitor(s.router);
        join(self);
      },
      [=](join_atom) {
        // The front declared this replica dead (it was silent too long) and moved its requests.
        auto& s = self->state;
        if (!s.status.joined) return;
        s.status.joined = false;
        release_all(self, "the front declared this replica dead and moved them");
        join(self);
      },
      [=](drain_atom) {
        auto& s = self->state;
        s.status.draining = true;
        if (s.router && s.status.joined) self->send(s.router, drain_atom::value);
      },
      [=](stats_atom) { return self->state.status; },
      [=](tick_atom) {
        auto& s = self->state;
        if (s.router && s.status.joined) {
          if (auto sched = scheduler_of(self)) {
            self->request(sched, std::chrono::milliseconds(s.report_ms * 4), stats_atom::value)
                .then(
                    [self](const scheduler_stats& st) {
                      auto& s = self->state;
                      if (!s.router || !s.status.joined) return;
                      self->send(s.router, report_atom::value, load_of(st, s.status.draining));
                    },
                    [](const caf::error&) {});
          }
        }
        self->delayed_send(self, detail::ms(s.report_ms), tick_atom::value);
      },
  };
}

}  // namespace

door_actor spawn_replica_door(caf::actor_system& sys, door_options opts) { return sys.spawn(door_fn, std::move(opts)); }

}  // namespace troupe::actors

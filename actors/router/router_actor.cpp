// The router actor: a thin shell around router_state. It owns the handles (the front's own
// scheduler from the pipeline's links, each worker's door from its join), turns the state's
// effects into messages, polls the local scheduler's load, checks liveness every report period,
// and monitors every door: a closed connection is a dead replica at once; a silent one (a
// half-open connection, a partitioned host: CAF alone would never notice) after
// dead_after_ms.
#include "actors/router/router_actor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "actors/detail/caf_util.hpp"
#include "actors/router/cluster_auth.hpp"
#include "actors/router/replica_door.hpp"
#include "actors/router/router_state.hpp"

namespace troupe::actors {

namespace {

struct router_actor_state {
  router_options opts;
  std::unique_ptr<router_state> st;
  pipeline_links links;
  bool local_added = false;
  std::map<caf::actor_addr, uint64_t> replica_of;  // a worker's door -> replica id
  std::map<uint64_t, door_actor> door_of;          // replica id -> its door (live ones)
  nonce_book nonces;                               // proofs already used (no replays)
  static inline const char* name = "troupe.router";
};

using self_ptr = router_actor::stateful_pointer<router_actor_state>;

// Times in an admitted request are this process's steady clock; a worker's differs. Across the
// wire the request carries its age and its time left, and the door turns them back.
admitted_request for_the_wire(admitted_request r, int64_t now) {
  r.arrival_us = now - r.arrival_us;
  if (r.deadline_us > 0) r.deadline_us = std::max<int64_t>(1, r.deadline_us - now);
  return r;
}

template <class Atom>
void to_replica(self_ptr self, uint64_t replica, Atom atom, uint64_t id) {
  auto& s = self->state;
  if (replica == 0) {
    if (auto sched = caf::actor_cast<scheduler_actor>(s.links.scheduler)) self->send(sched, atom, id);
    return;
  }
  if (auto it = s.door_of.find(replica); it != s.door_of.end()) self->send(it->second, atom, id);
}

void apply(self_ptr self) {
  auto& s = self->state;
  auto fx = s.st->take_effects();
  for (const auto& line : fx.log) spdlog::info("troupe: router: {}", line);
  const int64_t now = now_us();
  for (auto& [replica, r] : fx.place) {
    if (replica == 0) {
      if (auto sched = caf::actor_cast<scheduler_actor>(s.links.scheduler))
        self->send(sched, enqueue_atom::value, std::move(r));
    } else if (auto it = s.door_of.find(replica); it != s.door_of.end()) {
      self->send(it->second, enqueue_atom::value, for_the_wire(std::move(r), now));
    }
  }
  for (auto [replica, id] : fx.pause) to_replica(self, replica, pause_atom::value, id);
  for (auto [replica, id] : fx.resume) to_replica(self, replica, resume_atom::value, id);
  for (auto [replica, id] : fx.drop) to_replica(self, replica, drop_atom::value, id);
  if (!fx.to_streamer.empty())
    if (auto streamer = caf::actor_cast<streamer_actor>(s.links.streamer))
      self->send(streamer, output_atom::value, std::move(fx.to_streamer));
}

// The replica a message came from: 0 for this process (the front's own scheduler, whichever
// incarnation: a hot swap replaces it), a worker's id by its door, or nothing (not joined).
std::optional<uint64_t> sender_replica(self_ptr self) {
  const auto& sender = self->current_sender();
  if (!sender) return std::nullopt;
  if (sender->node() == self->node()) return uint64_t{0};
  auto it = self->state.replica_of.find(caf::actor_cast<caf::actor_addr>(sender));
  if (it == self->state.replica_of.end()) return std::nullopt;
  return it->second;
}

void poll_local(self_ptr self) {
  auto sched = caf::actor_cast<scheduler_actor>(self->state.links.scheduler);
  if (!sched || !self->state.local_added) return;
  self->request(sched, detail::ms(self->state.opts.config.dead_after_ms), stats_atom::value)
      .then(
          [self](const scheduler_stats& st) { self->state.st->on_report(0, load_of(st), now_us()); },
          [](const caf::error&) {
            // A busy or restarting scheduler: the next tick asks again (the local replica
            // never expires).
          });
}

router_actor::behavior_type router_fn(self_ptr self, router_options opts) {
  auto& s = self->state;
  s.opts = std::move(opts);
  auto policy = routing_policy_registry().make(s.opts.config.policy, s.opts.config.policy_opts);
  if (!policy) {
    // The pipeline checks the name before it starts us; this is a plugin gone missing.
    spdlog::error("troupe: router: {}; using round_robin", policy.error());
    policy = routing_policy_registry().make("round_robin", routing_options{});
  }
  s.st = std::make_unique<router_state>(s.opts.config, std::move(policy.value()));
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    auto it = s.replica_of.find(dm.source);
    if (it == s.replica_of.end()) return;
    const uint64_t id = it->second;
    s.replica_of.erase(it);
    s.door_of.erase(id);
    if (!s.st->live(id)) return;
    s.st->kill(id, "its connection closed (" + detail::describe(dm.reason) + ")", now_us());
    apply(self);
  });
  self->send(self, tick_atom::value);
  return {
      [=](enqueue_atom, admitted_request& r) {
        self->state.st->enqueue(std::move(r), now_us());
        apply(self);
      },
      [=](drop_atom, uint64_t id) {
        self->state.st->drop(id);
        apply(self);
      },
      [=](pause_atom, uint64_t id) {
        self->state.st->pause(id);
        apply(self);
      },
      [=](resume_atom, uint64_t id) {
        self->state.st->resume(id);
        apply(self);
      },
      [=](output_atom, const step_output& o) {
        auto replica = sender_replica(self);
        if (!replica) {
          // A replica declared dead that still runs (a partition healed): what it runs is
          // stale, tell it to free the sequences.
          if (auto sender = caf::actor_cast<door_actor>(self->current_sender())) {
            for (const auto& t : o.tokens) self->send(sender, drop_atom::value, t.id);
          }
          return;
        }
        self->state.st->on_output(*replica, o);
        apply(self);
      },
      [=](join_atom, const replica_hello& h) -> replica_welcome {
        auto& s = self->state;
        replica_welcome w;
        w.report_ms = s.opts.config.report_ms;
        const auto sender = caf::actor_cast<door_actor>(self->current_sender());
        const std::string who = h.name.empty() ? std::string("a worker") : "worker '" + h.name + "'";
        auto refuse = [&](std::string why) {
          spdlog::warn("troupe: router: refused {}: {}", who, why);
          w.error = std::move(why);
          return w;
        };
        if (!sender) return refuse("no reply address");
        if (auto ok = check_proof(s.opts.config.secret, h.nonce, h.proof, s.nonces, wall_clock_s()); !ok)
          return refuse(ok.error());
        if (h.model != s.opts.model)
          return refuse("it serves model '" + h.model + "', this cluster serves '" + s.opts.model + "'");
        if (h.n_vocab != s.opts.n_vocab)
          return refuse("its vocabulary has " + std::to_string(h.n_vocab) + " tokens, this cluster's " +
                        std::to_string(s.opts.n_vocab));
        if (auto why = s.st->numerics_conflict(h.numerics); !why.empty()) return refuse(why);
        if (h.block_size <= 0) return refuse("its KV block size is " + std::to_string(h.block_size));
        // Not refused: a replacement started while the old one drains, or before the front has
        // noticed its death, takes the same name; the log says which replica is which.
        if (auto why = s.st->name_conflict(h.name); !why.empty())
          spdlog::warn("troupe: router: {} joins while {}", who, why.substr(0, why.find(':')));
        if (s.replica_of.count(sender.address())) return refuse("it has joined already");
        const uint64_t id = s.st->add_replica(h.name, h.block_size, now_us(), h.numerics);
        s.replica_of[sender.address()] = id;
        s.door_of[id] = sender;
        self->monitor(sender);
        w.id = id;
        return w;
      },
      [=](report_atom, const load_report& r) {
        auto replica = sender_replica(self);
        if (!replica) {
          // Not (or no longer) a member: it must join again, as a new replica.
          if (auto sender = caf::actor_cast<door_actor>(self->current_sender())) self->send(sender, join_atom::value);
          return;
        }
        if (*replica == 0) return;
        self->state.st->on_report(*replica, r, now_us());
        apply(self);
      },
      [=](drain_atom) {
        auto replica = sender_replica(self);
        if (!replica || *replica == 0) return;
        spdlog::info("troupe: router: replica {} is draining", *replica);
        self->state.st->drain(*replica);
        apply(self);
      },
      [=](stats_atom) -> caf::result<router_stats> {
        // The local replica's figures are asked for first (its scheduler answers between steps),
        // so that /health and /metrics read right after an answer do not show it running: the
        // tick's are up to report_ms old. Workers' stay as their last report.
        auto sched = caf::actor_cast<scheduler_actor>(self->state.links.scheduler);
        if (!sched || !self->state.local_added) return self->state.st->stats();
        auto rp = self->make_response_promise<router_stats>();
        // At most 0.5 s: the server's own wait for these figures is 2 s.
        const int64_t wait_ms = std::clamp<int64_t>(self->state.opts.config.report_ms, 50, 500);
        self->request(sched, detail::ms(wait_ms), stats_atom::value)
            .then(
                [self, rp](const scheduler_stats& st) mutable {
                  self->state.st->on_report(0, load_of(st), now_us());
                  rp.deliver(self->state.st->stats());
                },
                [self, rp](const caf::error&) mutable { rp.deliver(self->state.st->stats()); });
        return rp;
      },
      [=](links_atom, pipeline_links& l) {
        auto& s = self->state;
        s.links = std::move(l);
        if (!s.local_added && s.links.scheduler) {
          s.st->add_local(s.opts.block_size, now_us());
          s.local_added = true;
        }
      },
      [=](route_atom, router_config& c) -> caf::result<bool> {
        auto p = routing_policy_registry().make(c.policy, c.policy_opts);
        if (!p) return caf::make_error(caf::sec::runtime_error, p.error());
        c.numerics = self->state.opts.config.numerics;  // restart-only: a reload keeps them
        self->state.opts.config = c;
        self->state.st->set_policy(std::move(c), std::move(p.value()));
        return true;
      },
      [=](restart_atom, const std::string& why) {
        // The crashed scheduler's outputs reached this mailbox before the supervisor's message
        // (it sent them before it died, and the supervisor learnt of its death after): what
        // was delivered is final, and the continuations start right after it.
        auto& s = self->state;
        if (!s.local_added) return;
        s.st->restarted(0, why, now_us());
        apply(self);
      },
      [=](tick_atom) {
        auto& s = self->state;
        poll_local(self);
        for (auto id : s.st->expire(now_us())) {
          // Silent past dead_after_ms: dead although its connection may look open. A late
          // join from the same door is a new replica (its old requests are stale there).
          for (auto it = s.replica_of.begin(); it != s.replica_of.end(); ++it)
            if (it->second == id) {
              if (auto d = s.door_of.find(id); d != s.door_of.end()) self->demonitor(d->second.address());
              s.replica_of.erase(it);
              break;
            }
          s.door_of.erase(id);
        }
        apply(self);
        self->delayed_send(self, detail::ms(s.opts.config.report_ms), tick_atom::value);
      },
  };
}

}  // namespace

router_actor spawn_router(caf::actor_system& sys, router_options opts) { return sys.spawn(router_fn, std::move(opts)); }

}  // namespace troupe::actors

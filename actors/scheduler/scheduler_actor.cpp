#include "actors/scheduler/scheduler.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "actors/detail/caf_util.hpp"
#include "actors/scheduler/scheduler_state.hpp"
#include "actors/supervisor/successor_link.hpp"
#include "actors/streamer/streamer.hpp"

namespace troupe::actors {

namespace {

struct scheduler_actor_state {
  std::shared_ptr<scheduler_state> sched;  // null once handed over
  scheduler_options opts;
  executor_actor exec;
  bool exec_ready = false;
  std::string exec_gone;     // why there is no executor any more (the supervisor gave up)
  uint64_t exec_epoch = 0;   // bumped when the executor is replaced: older answers are ignored
  bool tick_pending = false;
  pipeline_links links;
  // Handover: asked for (no new steps), then done (sched moved out, messages held or forwarded).
  bool handing_over = false;
  caf::typed_response_promise<scheduler_handover> handover_rp;
  detail::successor_link<scheduler_actor> next;
  int64_t retire_at_us = 0;
  static inline const char* name = "troupe.scheduler";
};

using self_ptr = scheduler_actor::stateful_pointer<scheduler_actor_state>;

void pump(self_ptr self);

void flush(self_ptr self) {
  // A restarted scheduler may get requests (the router's continuations) before the supervisor's
  // links: its output waits for them rather than get lost.
  if (!self->state.links.router) return;
  auto out = self->state.sched->take_output();
  if (out.empty()) return;
  // Outputs go up to the router (on a worker: its door to the front's router), which passes on
  // only what this replica still owns.
  auto up = caf::actor_cast<streamer_actor>(self->state.links.router);
  if (up) self->send(up, output_atom::value, std::move(out));
}

void executor_lost(self_ptr self, const std::string& why) {
  auto& st = self->state;
  if (!st.exec_ready) return;
  st.exec_ready = false;
  ++st.exec_epoch;
  st.sched->reset_executor(why);
  flush(self);
  // The supervisor replaces it, unless it already has (it compares handles).
  if (st.links.supervisor)
    caf::anon_send(st.links.supervisor, restart_atom::value, caf::actor_cast<caf::actor>(st.exec), why);
}

void dispatch(self_ptr self, step_plan plan) {
  auto& st = self->state;
  const uint64_t epoch = st.exec_epoch;
  self->request(st.exec, detail::ms(st.opts.step_timeout_ms), step_atom::value, std::move(plan))
      .then(
          [self, epoch](step_result& r) {
            if (epoch != self->state.exec_epoch || !self->state.sched) return;
            self->state.sched->apply(r, now_us());
            pump(self);
          },
          [self, epoch](caf::error& e) {
            if (epoch != self->state.exec_epoch || !self->state.sched) return;
            executor_lost(self, "the model step failed: " + detail::describe(e));
            pump(self);
          });
}

// Hands the state over once no step is in flight (their tokens are flushed first).
void try_handover(self_ptr self) {
  auto& st = self->state;
  if (!st.handing_over || !st.sched || st.sched->steps_in_flight() > 0) return;
  flush(self);
  scheduler_handover h;
  h.sched = std::move(st.sched);
  h.exec = caf::actor_cast<caf::actor>(st.exec);
  h.exec_ready = st.exec_ready;
  h.exec_gone = st.exec_gone;
  st.handover_rp.deliver(std::move(h));
}

void pump(self_ptr self) {
  auto& st = self->state;
  if (!st.sched) return;
  if (!st.exec_gone.empty()) st.sched->fail_all(errc::executor_fault, st.exec_gone);
  if (st.exec_ready && !st.handing_over) {
    while (auto p = st.sched->plan(now_us())) dispatch(self, std::move(*p));
  }
  flush(self);
  try_handover(self);
  if (st.sched && !st.tick_pending && !st.sched->empty()) {
    st.tick_pending = true;
    // Work is queued but no step runs: the policy is holding it back (a batching window), so
    // look again soon rather than at the next deadline check.
    const int64_t idle_ms = std::min<int64_t>(st.opts.tick_ms, 5);
    self->delayed_send(self, detail::ms(st.sched->steps_in_flight() == 0 ? idle_ms : st.opts.tick_ms), tick_atom::value);
  }
}

// After the handover: runs `f` against the successor now, or once it is known.
bool pass_on(self_ptr self, std::function<void(scheduler_actor&)> f) {
  auto& st = self->state;
  if (st.sched) return false;
  st.next.pass(std::move(f));
  return true;
}

scheduler_actor::behavior_type scheduler_behavior(self_ptr self) {
  return {
      [=](enqueue_atom, admitted_request& r) {
        if (pass_on(self, [self, r](scheduler_actor& s) mutable { self->send(s, enqueue_atom::value, std::move(r)); }))
          return;
        self->state.sched->enqueue(std::move(r), now_us());
        pump(self);
      },
      [=](drop_atom, uint64_t id) {
        if (pass_on(self, [self, id](scheduler_actor& s) { self->send(s, drop_atom::value, id); })) return;
        self->state.sched->drop(id, now_us());
        pump(self);
      },
      [=](pause_atom, uint64_t id) {
        if (pass_on(self, [self, id](scheduler_actor& s) { self->send(s, pause_atom::value, id); })) return;
        self->state.sched->pause(id);
      },
      [=](resume_atom, uint64_t id) {
        if (pass_on(self, [self, id](scheduler_actor& s) { self->send(s, resume_atom::value, id); })) return;
        self->state.sched->resume(id);
        pump(self);
      },
      [=](tick_atom) {
        auto& s = self->state;
        s.tick_pending = false;
        if (!s.sched) {
          if (s.next.successor() && now_us() >= s.retire_at_us) self->quit();
          return;
        }
        s.sched->expire(now_us());
        pump(self);
      },
      [=](executor_atom, caf::actor h, std::string& reason) {
        if (pass_on(self, [self, h, reason](scheduler_actor& s) { self->send(s, executor_atom::value, h, reason); }))
          return;
        auto& s = self->state;
        ++s.exec_epoch;
        s.sched->reset_executor(reason);
        s.exec = caf::actor_cast<executor_actor>(h);
        s.exec_ready = static_cast<bool>(s.exec);
        // No executor any more: nothing queued, nor anything that comes, can ever run.
        s.exec_gone = s.exec_ready ? std::string() : reason;
        pump(self);
      },
      [=](stats_atom) -> caf::result<scheduler_stats> {
        auto& s = self->state;
        if (s.sched) return s.sched->stats();
        if (s.next.successor()) return self->delegate(s.next.successor(), stats_atom::value);
        scheduler_stats none;
        none.policy = "(handing over)";
        return none;
      },
      [=](links_atom, pipeline_links& l) {
        self->state.links = std::move(l);
        pump(self);
      },
      [=](handover_atom) -> caf::result<scheduler_handover> {
        auto& s = self->state;
        if (!s.sched || s.handing_over) return caf::make_error(caf::sec::runtime_error, "a handover is already under way");
        s.handing_over = true;
        s.handover_rp = self->make_response_promise<scheduler_handover>();
        auto rp = s.handover_rp;
        pump(self);  // hands over at once when no step is in flight
        return rp;
      },
      [=](forward_atom, caf::actor successor) {
        auto& s = self->state;
        s.next.set(caf::actor_cast<scheduler_actor>(successor));
        s.retire_at_us = now_us() + detail::forward_grace_ms * 1000;
        self->delayed_send(self, detail::ms(detail::forward_grace_ms + 10), tick_atom::value);
      },
  };
}

scheduler_actor::behavior_type scheduler_fn(self_ptr self, scheduler_options opts, executor_actor exec) {
  // The pipeline checked the name before spawning; fall back to fcfs rather than die here.
  auto policy = scheduling_policy_registry().make(opts.config.policy, opts.config.policy_opts);
  if (!policy) policy = scheduling_policy_registry().make("fcfs");
  auto& st = self->state;
  st.sched = std::make_shared<scheduler_state>(opts.config, opts.geometry, std::move(policy.value()));
  st.opts = std::move(opts);
  st.exec = std::move(exec);
  st.exec_ready = static_cast<bool>(st.exec);
  return scheduler_behavior(self);
}

scheduler_actor::behavior_type successor_fn(self_ptr self, scheduler_options opts, scheduler_handover from) {
  auto policy = scheduling_policy_registry().make(opts.config.policy, opts.config.policy_opts);
  if (!policy) policy = scheduling_policy_registry().make(from.sched->config().policy, from.sched->config().policy_opts);
  auto& st = self->state;
  st.sched = std::move(from.sched);
  st.sched->reconfigure(opts.config, std::move(policy.value()));
  st.opts = std::move(opts);
  st.exec = caf::actor_cast<executor_actor>(from.exec);
  st.exec_ready = from.exec_ready;
  st.exec_gone = std::move(from.exec_gone);
  // Its first pump comes with the links the supervisor sends right after spawning it.
  return scheduler_behavior(self);
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, executor_actor exec) {
  return sys.spawn(scheduler_fn, std::move(opts), std::move(exec));
}

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, scheduler_handover from) {
  return sys.spawn(successor_fn, std::move(opts), std::move(from));
}

}  // namespace troupe::actors

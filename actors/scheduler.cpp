#include "actors/scheduler.hpp"

#include <caf/all.hpp>

#include "actors/detail/caf_util.hpp"
#include "actors/streamer.hpp"

namespace troupe::actors {

namespace {

struct scheduler_actor_state {
  std::unique_ptr<scheduler_state> sched;
  scheduler_options opts;
  executor_actor exec;
  bool exec_ready = false;
  std::string exec_gone;     // why there is no executor any more (the supervisor gave up)
  uint64_t exec_epoch = 0;   // bumped when the executor is replaced: older answers are ignored
  bool tick_pending = false;
  pipeline_links links;
  static inline const char* name = "troupe.scheduler";
};

using self_ptr = scheduler_actor::stateful_pointer<scheduler_actor_state>;

void pump(self_ptr self);

void flush(self_ptr self) {
  auto out = self->state.sched->take_output();
  if (out.empty()) return;
  auto streamer = caf::actor_cast<streamer_actor>(self->state.links.streamer);
  if (streamer) self->send(streamer, output_atom::value, std::move(out));
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
            if (epoch != self->state.exec_epoch) return;
            self->state.sched->apply(r, now_us());
            pump(self);
          },
          [self, epoch](caf::error& e) {
            if (epoch != self->state.exec_epoch) return;
            executor_lost(self, "the model step failed: " + detail::describe(e));
            pump(self);
          });
}

void pump(self_ptr self) {
  auto& st = self->state;
  if (!st.exec_gone.empty()) st.sched->fail_all(errc::executor_fault, st.exec_gone);
  if (st.exec_ready) {
    while (auto p = st.sched->plan(now_us())) dispatch(self, std::move(*p));
  }
  flush(self);
  if (!st.tick_pending && !st.sched->empty()) {
    st.tick_pending = true;
    self->delayed_send(self, detail::ms(st.opts.tick_ms), tick_atom::value);
  }
}

scheduler_actor::behavior_type scheduler_fn(self_ptr self, scheduler_options opts, executor_actor exec) {
  // The pipeline checked the name before spawning; fall back to fcfs rather than die here.
  auto policy = policy_registry::global().make(opts.config.policy, opts.config.policy_opts);
  if (!policy) policy = policy_registry::global().make("fcfs");
  auto& st = self->state;
  st.sched = std::make_unique<scheduler_state>(opts.config, opts.geometry, std::move(policy.value()));
  st.opts = std::move(opts);
  st.exec = std::move(exec);
  st.exec_ready = static_cast<bool>(st.exec);
  return {
      [=](enqueue_atom, admitted_request& r) {
        self->state.sched->enqueue(std::move(r), now_us());
        pump(self);
      },
      [=](drop_atom, uint64_t id) {
        self->state.sched->drop(id, now_us());
        pump(self);
      },
      [=](pause_atom, uint64_t id) { self->state.sched->pause(id); },
      [=](resume_atom, uint64_t id) {
        self->state.sched->resume(id);
        pump(self);
      },
      [=](tick_atom) {
        self->state.tick_pending = false;
        self->state.sched->expire(now_us());
        pump(self);
      },
      [=](executor_atom, caf::actor h, std::string& reason) {
        auto& s = self->state;
        ++s.exec_epoch;
        s.sched->reset_executor(reason);
        s.exec = caf::actor_cast<executor_actor>(h);
        s.exec_ready = static_cast<bool>(s.exec);
        // No executor any more: nothing queued, nor anything that comes, can ever run.
        s.exec_gone = s.exec_ready ? std::string() : reason;
        pump(self);
      },
      [=](stats_atom) { return self->state.sched->stats(); },
      [=](links_atom, pipeline_links& l) {
        self->state.links = std::move(l);
        pump(self);
      },
  };
}

}  // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts, executor_actor exec) {
  return sys.spawn(scheduler_fn, std::move(opts), std::move(exec));
}

}  // namespace troupe::actors

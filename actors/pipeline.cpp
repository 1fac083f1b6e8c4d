#include "actors/pipeline.hpp"

#include <caf/all.hpp>

#include <deque>
#include <map>

#include <spdlog/spdlog.h>

#include "actors/detail/caf_util.hpp"
#include "model/gguf_reader.hpp"

namespace troupe::actors {

namespace {

using start_atom = caf::atom_constant<caf::atom("start")>;

struct supervisor_state {
  pipeline_config cfg;
  backend_maker make;
  std::shared_ptr<const text_codec> codec;
  std::shared_ptr<links_cell> cell;
  pipeline_links links;
  executor_info info;
  std::map<std::string, std::deque<int64_t>> restarts;  // role -> recent restart times
  bool stopping = false;
  static inline const char* name = "troupe.supervisor";
};

using self_ptr = caf::stateful_actor<supervisor_state>*;

void wire(self_ptr self) {
  auto& st = self->state;
  st.links.supervisor = caf::actor_cast<caf::actor>(self);
  st.cell->set(st.links);
  for (const auto& h : {st.links.admission, st.links.cache, st.links.scheduler, st.links.streamer})
    if (h) self->send(h, links_atom::value, st.links);
}

scheduler_options scheduler_opts(const supervisor_state& st) {
  scheduler_options o;
  o.config = st.cfg.scheduler;
  o.geometry = kv_geometry{st.info.n_blocks, st.info.block_size, st.info.n_ctx};
  o.step_timeout_ms = st.cfg.step_timeout_ms;
  return o;
}

admission_config admission_cfg(const supervisor_state& st) {
  auto a = st.cfg.admission;
  a.model_name = st.cfg.model_name;
  a.n_ctx = st.info.n_ctx;
  a.n_vocab = st.info.n_vocab;
  return a;
}

template <class Handle>
caf::actor adopt(self_ptr self, Handle h) {
  auto a = caf::actor_cast<caf::actor>(h);
  self->monitor(a);
  return a;
}

// Restart intensity: at most max_restarts per window for one role.
bool may_restart(self_ptr self, const std::string& role) {
  auto& st = self->state;
  auto& q = st.restarts[role];
  const int64_t now = now_us();
  while (!q.empty() && now - q.front() > st.cfg.restart_window_ms * 1000) q.pop_front();
  if (static_cast<int32_t>(q.size()) >= st.cfg.max_restarts) return false;
  q.push_back(now);
  return true;
}

void restart_executor(self_ptr self, const std::string& reason) {
  auto& st = self->state;
  if (!may_restart(self, "executor")) {
    spdlog::error("troupe: the executor failed {} times within {} ms; giving up: {}", st.cfg.max_restarts,
                  st.cfg.restart_window_ms, reason);
    st.links.executor = caf::actor{};
    wire(self);
    self->send(caf::actor_cast<scheduler_actor>(st.links.scheduler), executor_atom::value, caf::actor{},
               "the executor failed and could not be restarted: " + reason);
    return;
  }
  spdlog::warn("troupe: restarting the executor: {}", reason);
  auto exec = spawn_executor(self->system(), st.make);
  st.links.executor = adopt(self, exec);
  wire(self);
  self->request(exec, detail::ms(st.cfg.startup_timeout_ms), info_atom::value)
      .then(
          [self, exec, reason](const executor_info&) {
            auto& s = self->state;
            if (s.stopping || s.links.executor != caf::actor_cast<caf::actor>(exec)) return;
            self->send(caf::actor_cast<scheduler_actor>(s.links.scheduler), executor_atom::value,
                       caf::actor_cast<caf::actor>(exec), reason);
          },
          [](const caf::error&) {
            // Its down message starts the next attempt.
          });
}

void restart(self_ptr self, const std::string& role, const std::string& reason) {
  auto& st = self->state;
  if (role == "executor") return restart_executor(self, reason);
  if (!may_restart(self, role)) {
    spdlog::error("troupe: the {} failed {} times within {} ms; it stays down: {}", role, st.cfg.max_restarts,
                  st.cfg.restart_window_ms, reason);
    return;
  }
  spdlog::warn("troupe: restarting the {}: {}", role, reason);
  auto& sys = self->system();
  if (role == "scheduler") {
    st.links.scheduler =
        adopt(self, spawn_scheduler(sys, scheduler_opts(st), caf::actor_cast<executor_actor>(st.links.executor)));
    wire(self);
    // Its sequences are gone: their streams end with an error.
    self->send(caf::actor_cast<streamer_actor>(st.links.streamer), fail_atom::value, uint64_t{0},
               std::string(errc::internal), "the scheduler failed and was restarted: " + reason);
  } else if (role == "streamer") {
    st.links.streamer = adopt(self, spawn_streamer(sys, st.cfg.streamer, st.codec));
    wire(self);
  } else if (role == "admission") {
    st.links.admission = adopt(self, spawn_admission(sys, admission_cfg(st), st.codec));
    wire(self);
  } else if (role == "cache") {
    st.links.cache = adopt(self, spawn_cache(sys, st.cfg.cache, st.codec));
    wire(self);
  }
}

std::string role_of(const supervisor_state& st, const caf::actor_addr& a) {
  if (a == st.links.executor.address()) return "executor";
  if (a == st.links.scheduler.address()) return "scheduler";
  if (a == st.links.streamer.address()) return "streamer";
  if (a == st.links.admission.address()) return "admission";
  if (a == st.links.cache.address()) return "cache";
  return {};
}

void shutdown(self_ptr self, const caf::error& reason) {
  auto& st = self->state;
  st.stopping = true;
  for (const auto& h : {st.links.admission, st.links.cache, st.links.scheduler, st.links.streamer, st.links.executor})
    if (h) self->send_exit(h, reason ? reason : caf::make_error(caf::exit_reason::user_shutdown));
  st.links = {};
  st.cell->set({});
}

caf::behavior supervisor_fn(self_ptr self, pipeline_config cfg, backend_maker make,
                            std::shared_ptr<const text_codec> codec, std::shared_ptr<links_cell> cell) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.make = std::move(make);
  st.codec = std::move(codec);
  st.cell = std::move(cell);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    if (s.stopping) return;
    const auto role = role_of(s, dm.source);
    if (role.empty()) return;  // an actor already replaced
    restart(self, role, dm.reason ? detail::describe(dm.reason) : std::string("it stopped"));
  });
  self->set_exit_handler([self](caf::exit_msg& m) {
    shutdown(self, m.reason);
    self->quit(m.reason);
  });
  return {
      [=](start_atom) -> caf::result<executor_info> {
        auto rp = self->make_response_promise<executor_info>();
        auto& s = self->state;
        auto exec = spawn_executor(self->system(), s.make);
        s.links.executor = adopt(self, exec);
        self->request(exec, detail::ms(s.cfg.startup_timeout_ms), info_atom::value)
            .then(
                [self, rp, exec](executor_info& info) mutable {
                  auto& s = self->state;
                  s.info = info;
                  auto& sys = self->system();
                  s.links.streamer = adopt(self, spawn_streamer(sys, s.cfg.streamer, s.codec));
                  s.links.scheduler = adopt(self, spawn_scheduler(sys, scheduler_opts(s), exec));
                  s.links.cache = adopt(self, spawn_cache(sys, s.cfg.cache, s.codec));
                  s.links.admission = adopt(self, spawn_admission(sys, admission_cfg(s), s.codec));
                  wire(self);
                  rp.deliver(info);
                },
                [self, rp](caf::error& e) mutable {
                  rp.deliver(e);
                  shutdown(self, caf::make_error(caf::exit_reason::user_shutdown));
                  self->quit();
                });
        return rp;
      },
      [=](restart_atom, const caf::actor& failed, const std::string& reason) {
        auto& s = self->state;
        if (s.stopping || !failed) return;
        const auto role = role_of(s, failed.address());
        if (role.empty()) return;  // already replaced
        // It may be stuck rather than dead: make sure it goes, and do not wait for it.
        self->demonitor(failed);
        self->send_exit(failed, caf::exit_reason::kill);
        restart(self, role, reason);
      },
      [=](links_atom) { return self->state.links; },
  };
}

template <class Reply, class Handle, class Atom>
result<Reply> ask(caf::actor_system& sys, const Handle& h, std::chrono::milliseconds timeout, Atom atom) {
  if (!h) return make_error("the actor is not running");
  caf::scoped_actor self{sys};
  result<Reply> out = make_error("no answer");
  self->request(h, timeout, atom)
      .receive([&](Reply& r) { out = std::move(r); },
               [&](caf::error& e) { out = make_error(detail::describe(e)); });
  return out;
}

}  // namespace

backend_maker make_backend_maker(std::shared_ptr<model::llama_model> m, model::backend_options o, std::string backend) {
  return [m = std::move(m), o, backend = std::move(backend)]() { return model::make_backend(backend, m, o); };
}

pipeline::pipeline(caf::actor_system& sys, pipeline_config cfg, std::shared_ptr<const text_codec> codec)
    : sys_(sys), cfg_(std::move(cfg)), codec_(std::move(codec)), cell_(std::make_shared<links_cell>()) {}

result<std::unique_ptr<pipeline>> pipeline::start(caf::actor_system& sys, pipeline_config cfg, backend_maker make,
                                                  std::shared_ptr<const text_codec> codec) {
  if (!codec) return make_error("the pipeline needs a text codec");
  // Check what can be checked before anything runs.
  if (auto p = policy_registry::global().make(cfg.scheduler.policy, cfg.scheduler.policy_opts); !p)
    return make_error(p.error());
  if (cfg.cache.enabled)
    if (auto c = response_cache_registry().find(cfg.cache.policy); !c) return make_error(c.error());
  std::unique_ptr<pipeline> p(new pipeline(sys, cfg, codec));
  p->supervisor_ = sys.spawn(supervisor_fn, cfg, std::move(make), codec, p->cell_);
  caf::scoped_actor self{sys};
  std::string failure;
  self->request(p->supervisor_, detail::ms(cfg.startup_timeout_ms + 5000), start_atom::value)
      .receive([&](executor_info& info) { p->info_ = info; },
               [&](caf::error& e) { failure = detail::describe(e); });
  if (!failure.empty()) {
    p->stop();
    return make_error("the pipeline did not start: " + failure);
  }
  return p;
}

result<std::unique_ptr<pipeline>> pipeline::start(caf::actor_system& sys, pipeline_config cfg,
                                                  std::shared_ptr<model::llama_model> m, model::backend_options o,
                                                  std::string backend) {
  if (!m) return make_error("no model");
  auto codec = make_gguf_codec(m->file());
  if (!codec) return make_error("the model's tokenizer: " + codec.error());
  if (cfg.model_name == "default" && !m->params().name.empty()) cfg.model_name = m->params().name;
  return start(sys, std::move(cfg), make_backend_maker(std::move(m), o, std::move(backend)), std::move(codec.value()));
}

pipeline::~pipeline() { stop(); }

void pipeline::stop() {
  if (!supervisor_) return;
  auto l = cell_->get();
  caf::scoped_actor self{sys_};
  self->send_exit(supervisor_, caf::exit_reason::user_shutdown);
  self->wait_for(supervisor_);
  for (const auto& h : {l.admission, l.cache, l.scheduler, l.streamer, l.executor})
    if (h) self->wait_for(h);
  supervisor_ = nullptr;
  cell_->set({});
}

result<scheduler_stats> pipeline::get_scheduler_stats(std::chrono::milliseconds t) const {
  return ask<scheduler_stats>(sys_, caf::actor_cast<scheduler_actor>(links().scheduler), t, stats_atom::value);
}
result<admission_stats> pipeline::get_admission_stats(std::chrono::milliseconds t) const {
  return ask<admission_stats>(sys_, caf::actor_cast<admission_actor>(links().admission), t, stats_atom::value);
}
result<streamer_stats> pipeline::get_streamer_stats(std::chrono::milliseconds t) const {
  return ask<streamer_stats>(sys_, caf::actor_cast<streamer_actor>(links().streamer), t, stats_atom::value);
}
result<cache_stats> pipeline::get_cache_stats(std::chrono::milliseconds t) const {
  return ask<cache_stats>(sys_, caf::actor_cast<cache_actor>(links().cache), t, stats_atom::value);
}

}  // namespace troupe::actors

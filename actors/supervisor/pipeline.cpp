#include "actors/supervisor/pipeline.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>

#include <spdlog/spdlog.h>

#include "actors/detail/caf_util.hpp"
#include "actors/response_cache/policy.hpp"
#include "actors/router/router_actor.hpp"
#include "actors/supervisor/successor_link.hpp"
#include "model/gguf_reader.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::pipeline_config)

namespace troupe::actors {

namespace {

using start_atom = caf::atom_constant<caf::atom("start")>;
using reconfig_atom = caf::atom_constant<caf::atom("reconfig")>;
using retire_atom = caf::atom_constant<caf::atom("retire")>;

struct supervisor_state {
  pipeline_config cfg;
  backend_maker make;
  std::shared_ptr<const text_codec> codec;
  std::shared_ptr<links_cell> cell;
  pipeline_links links;
  executor_info info;
  std::map<std::string, std::deque<int64_t>> restarts;  // role -> recent restart times
  bool stopping = false;
  bool reconfiguring = false;  // one reconfiguration at a time
  std::vector<caf::actor> retiring;  // replaced actors still forwarding to their successors
  // A worker's pipeline: its door to the front's router, in place of a router of its own (the
  // worker owns it).
  caf::actor upstream;
  static inline const char* name = "troupe.supervisor";
};

using self_ptr = caf::stateful_actor<supervisor_state>*;

std::string describe_cache(const response_cache_config& c) {
  if (!c.enabled) return "off";
  if (c.policy != "semantic") return c.policy;
  char buf[96];
  std::snprintf(buf, sizeof buf, " (threshold %.3f, ttl %lld s)", static_cast<double>(c.semantic.threshold),
                static_cast<long long>(c.semantic.ttl_s));
  return c.policy + buf;
}

std::string describe_filters(const std::vector<filter_spec>& f) {
  std::string s;
  for (const auto& x : f) s += (s.empty() ? "" : ", ") + x.name;
  return s.empty() ? std::string("none") : s;
}

std::string describe_scheduler(const scheduler_config& c) {
  return c.policy + " (max_num_seqs " + std::to_string(c.max_num_seqs) + ", max_batched_tokens " +
         std::to_string(c.max_batched_tokens) + ")";
}

void wire(self_ptr self) {
  auto& st = self->state;
  st.links.supervisor = caf::actor_cast<caf::actor>(self);
  st.cell->set(st.links);
  for (const auto& h : {st.links.admission, st.links.cache, st.links.scheduler, st.links.streamer, st.links.router})
    if (h) self->send(h, links_atom::value, st.links);
}

router_options router_opts(const supervisor_state& st) {
  router_options o;
  o.config = st.cfg.router;
  o.model = st.cfg.model_name;
  o.n_vocab = st.info.n_vocab;
  o.block_size = st.info.block_size;
  return o;
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
  // Admission refuses a request's unknown or unavailable `speculative` method before the
  // response cache can answer it (a hit must be refused as a miss is).
  a.speculative = st.cfg.scheduler.speculative;
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
  auto exec = spawn_executor(self->system(), st.make, st.codec);
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
    // Its sequences are gone. The router knows each one's tokens delivered so far and places
    // them again as continuations (after the links just sent, so they reach the new scheduler).
    // A worker has no router of its own (its door leads to the front's): there the streams end
    // with an error.
    if (!st.upstream)
      self->send(caf::actor_cast<router_actor>(st.links.router), restart_atom::value,
                 "the scheduler failed and was restarted: " + reason);
    else
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
  } else if (role == "router") {
    st.links.router = adopt(self, spawn_router(sys, router_opts(st)));
    wire(self);
    // Which replica owns which request is gone: those streams end with an error (outputs still
    // coming for them are stale to the new router, which has the replicas drop them).
    self->send(caf::actor_cast<streamer_actor>(st.links.streamer), fail_atom::value, uint64_t{0},
               std::string(errc::internal), "the router failed and was restarted: " + reason);
  }
}

std::string role_of(const supervisor_state& st, const caf::actor_addr& a) {
  if (a == st.links.executor.address()) return "executor";
  if (a == st.links.scheduler.address()) return "scheduler";
  if (a == st.links.streamer.address()) return "streamer";
  if (a == st.links.admission.address()) return "admission";
  if (a == st.links.cache.address()) return "cache";
  if (!st.upstream && a == st.links.router.address()) return "router";
  return {};
}

void shutdown(self_ptr self, const caf::error& reason) {
  auto& st = self->state;
  st.stopping = true;
  for (const auto& h : {st.links.admission, st.links.cache, st.links.scheduler, st.links.streamer, st.links.executor})
    if (h) self->send_exit(h, reason ? reason : caf::make_error(caf::exit_reason::user_shutdown));
  if (st.links.router && !st.upstream)
    self->send_exit(st.links.router, reason ? reason : caf::make_error(caf::exit_reason::user_shutdown));
  for (const auto& h : st.retiring) self->send_exit(h, caf::exit_reason::user_shutdown);
  st.retiring.clear();
  st.links = {};
  st.cell->set({});
}

using stage_done = std::function<void(std::vector<std::string>, std::string)>;
using stage = std::function<void(std::vector<std::string>, stage_done)>;

// Runs stages[i..] one after the other (each may wait for an actor's answer); stops at the first error.
void run_stages(std::shared_ptr<std::vector<stage>> stages, size_t i, std::vector<std::string> done, stage_done finish) {
  if (i == stages->size()) return finish(std::move(done), {});
  (*stages)[i](std::move(done), [stages, i, finish](std::vector<std::string> d, std::string err) mutable {
    if (!err.empty()) return finish(std::move(d), std::move(err));
    run_stages(std::move(stages), i + 1, std::move(d), std::move(finish));
  });
}

// A replaced actor forwards for a while, then the supervisor ends it (its down message is expected).
void retire(self_ptr self, const caf::actor& old) {
  self->state.retiring.push_back(old);
  self->delayed_send(self, detail::ms(detail::forward_grace_ms), retire_atom::value, old);
}

// The shape every swap shares (the caller named the stage: its settings changed). Unless its
// actor is down, `ask` puts a question to it (a request with its timeout); on the answer, `take`
// puts the new settings in place and returns the log line's "before -> after", and the stage's
// name joins the answer. When the actor refuses or does not answer, the reload stops with
// `refusal` and the error, and the running actor stays. `k` gets the names of the stages swapped
// so far (or that error).
template <class Reply, class Ask, class Take>
void swap_stage(self_ptr self, caf::actor pipeline_links::*slot, const char* stage, const char* label,
                const char* refusal, Ask ask, Take take, std::vector<std::string> done, stage_done k) {
  const caf::actor current = self->state.links.*slot;
  if (!current) return k(std::move(done), {});
  ask(current).then(
      [current, stage, label, take, done, k](Reply& r) mutable {
        spdlog::info("troupe: {} swapped: {}", label, take(current, r));
        done.push_back(stage);
        k(std::move(done), {});
      },
      [refusal, done, k](caf::error& e) mutable { k(std::move(done), refusal + detail::describe(e)); });
}

// What differs between the stages replaced by handover.
template <class Config>
struct handover_swap {
  const char* stage;                                       // its name in reconfigure's answer
  const char* label;                                       // its name in the log line
  caf::actor pipeline_links::*slot;                        // where the links hold its actor
  Config pipeline_config::*part;                           // its settings
  std::chrono::milliseconds timeout;                       // for the handover
  const char* refusal;                                     // the error when it does not hand over
  std::string (*describe)(const Config&, const Config&);  // the log line's "before -> after"
};

// A swap by handover (scheduler, admission, cache): the running actor hands over its state, the
// successor starts from it with the new settings (`spawn`) and is wired in, and the old actor
// passes on what still reaches it until it is retired.
template <class Actor, class Handover, class Config, class Spawn>
void swap_by_handover(self_ptr self, const handover_swap<Config>& how, const Config& next, Spawn spawn,
                      std::vector<std::string> done, stage_done k) {
  swap_stage<Handover>(
      self, how.slot, how.stage, how.label, how.refusal,
      [self, timeout = how.timeout](const caf::actor& old) {
        return self->request(caf::actor_cast<Actor>(old), timeout, handover_atom::value);
      },
      [self, how, next, spawn](const caf::actor& old, Handover& h) {
        auto& s = self->state;
        const Config before = s.cfg.*how.part;
        s.cfg.*how.part = next;
        auto succ = spawn(self, std::move(h));
        s.links.*how.slot = adopt(self, succ);
        wire(self);
        self->send(caf::actor_cast<Actor>(old), forward_atom::value, caf::actor_cast<caf::actor>(succ));
        retire(self, old);
        return how.describe(before, s.cfg.*how.part);
      },
      std::move(done), std::move(k));
}

// The log line's "before -> after" for a stage whose settings one describe function names.
template <class Config, std::string (*describe)(const Config&)>
std::string from_to(const Config& before, const Config& after) {
  return describe(before) + " -> " + describe(after);
}

std::string admission_from_to(const admission_config& before, const admission_config& after) {
  return fmt::format("policy {} -> {} (max_pending {}, max_tokens_cap {}, {} tenants)", before.policy, after.policy,
                     after.max_pending, after.max_tokens_cap, after.tenants.size());
}

// Each stage replaces one actor (the caller named it: its settings changed), then calls `k` with
// the names of the actors replaced so far (or an error: the running actor stays).
void swap_scheduler(self_ptr self, const pipeline_config& next, std::vector<std::string> done, stage_done k) {
  swap_by_handover<scheduler_actor, scheduler_handover>(
      self,
      {"scheduler", "scheduler", &pipeline_links::scheduler, &pipeline_config::scheduler,
       detail::ms(self->state.cfg.step_timeout_ms + 5000), "the scheduler did not hand over its state: ",
       &from_to<scheduler_config, describe_scheduler>},
      next.scheduler,
      [](self_ptr self, scheduler_handover h) {
        return spawn_scheduler(self->system(), scheduler_opts(self->state), std::move(h));
      },
      std::move(done), std::move(k));
}

void swap_admission(self_ptr self, const pipeline_config& next, std::vector<std::string> done, stage_done k) {
  swap_by_handover<admission_actor, admission_handover>(
      self,
      {"admission", "admission", &pipeline_links::admission, &pipeline_config::admission, std::chrono::seconds(10),
       "admission did not hand over its state: ", &admission_from_to},
      next.admission,
      [](self_ptr self, admission_handover h) {
        return spawn_admission(self->system(), admission_cfg(self->state), std::move(h));
      },
      std::move(done), std::move(k));
}

// The old cache closes its store before it answers: the new one may open the same directory.
void swap_cache(self_ptr self, const pipeline_config& next, std::vector<std::string> done, stage_done k) {
  swap_by_handover<cache_actor, bool>(
      self,
      {"cache", "response cache", &pipeline_links::cache, &pipeline_config::cache, std::chrono::seconds(30),
       "the cache did not hand over: ", &from_to<response_cache_config, describe_cache>},
      next.cache,
      [](self_ptr self, bool) { return spawn_cache(self->system(), self->state.cfg.cache, self->state.codec); },
      std::move(done), std::move(k));
}

// Output filters change in place: the streamer keeps its open streams (and their filters) and
// gives streams opened afterwards the new chain, so nothing needs handing over.
void swap_filters(self_ptr self, const pipeline_config& next, output_filters chain,
                  std::vector<std::string> done, stage_done k) {
  const auto& filters = next.streamer.filters;
  swap_stage<bool>(
      self, &pipeline_links::streamer, "streamer", "output filters", "the streamer did not take the new filters: ",
      [self, chain = std::move(chain), filters](const caf::actor& streamer) mutable {
        return self->request(caf::actor_cast<streamer_actor>(streamer), std::chrono::seconds(10), filters_atom::value,
                             filter_update{std::move(chain), filters});
      },
      [self, filters](const caf::actor&, bool) {
        auto& f = self->state.cfg.streamer.filters;
        const std::string before = describe_filters(f);
        f = filters;
        return before + " -> " + describe_filters(f) + " (for streams opened from now on)";
      },
      std::move(done), std::move(k));
}

// The routing policy changes in place: what is in flight stays on its replica.
void swap_router(self_ptr self, const pipeline_config& next, std::vector<std::string> done, stage_done k) {
  if (self->state.upstream) return k(std::move(done), {});  // a worker routes nothing
  swap_stage<bool>(
      self, &pipeline_links::router, "router", "routing policy", "the router did not take the new policy: ",
      [self, c = next.router](const caf::actor& router) {
        return self->request(caf::actor_cast<router_actor>(router), std::chrono::seconds(10), route_atom::value, c);
      },
      [self, c = next.router](const caf::actor&, bool) {
        auto& r = self->state.cfg.router;
        const std::string before = r.policy;
        r = c;
        return before + " -> " + r.policy;
      },
      std::move(done), std::move(k));
}

// What can be checked of a config before anything is spawned or swapped: names in their
// registries, and each part's options (its factory runs once).
status check_parts(const pipeline_config& c) {
  if (auto p = scheduling_policy_registry().make(c.scheduler.policy, c.scheduler.policy_opts); !p)
    return make_error(p.error());
  if (c.cache.enabled)
    if (auto r = response_cache_registry().find(c.cache.policy); !r) return make_error(r.error());
  if (auto a = validate_admission_policy(c.admission); !a) return make_error(a.error());
  if (auto f = output_filters::make(c.streamer.filters); !f) return make_error(f.error());
  if (auto r = routing_policy_registry().make(c.router.policy, c.router.policy_opts); !r) return make_error(r.error());
  return {};
}

caf::behavior supervisor_fn(self_ptr self, pipeline_config cfg, backend_maker make,
                            std::shared_ptr<const text_codec> codec, std::shared_ptr<links_cell> cell,
                            caf::actor upstream) {
  auto& st = self->state;
  st.upstream = std::move(upstream);
  st.cfg = std::move(cfg);
  st.make = std::move(make);
  st.codec = std::move(codec);
  st.cell = std::move(cell);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    if (s.stopping) return;
    auto retired = std::find_if(s.retiring.begin(), s.retiring.end(),
                                [&](const caf::actor& a) { return a.address() == dm.source; });
    if (retired != s.retiring.end()) {
      s.retiring.erase(retired);  // a replaced actor finished forwarding
      return;
    }
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
        auto exec = spawn_executor(self->system(), s.make, s.codec);
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
                  s.links.router = s.upstream ? s.upstream : adopt(self, spawn_router(sys, router_opts(s)));
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
      [=](retire_atom, const caf::actor& old) {
        if (std::find(self->state.retiring.begin(), self->state.retiring.end(), old) != self->state.retiring.end())
          self->send_exit(old, caf::exit_reason::user_shutdown);
      },
      // Hot reload: replaces the stages named; answers what it replaced.
      [=](reconfig_atom, pipeline_config& next, const std::vector<std::string>& names) -> caf::result<std::vector<std::string>> {
        auto& s = self->state;
        if (s.stopping) return caf::make_error(caf::sec::runtime_error, "the pipeline is stopping");
        if (s.reconfiguring) return caf::make_error(caf::sec::runtime_error, "another reconfiguration is under way");
        if (auto ok = check_parts(next); !ok) return caf::make_error(caf::sec::runtime_error, ok.error());
        auto chain = output_filters::make(next.streamer.filters);
        if (!chain) return caf::make_error(caf::sec::runtime_error, chain.error());
        auto rp = self->make_response_promise<std::vector<std::string>>();
        s.reconfiguring = true;
        auto finish = [self, rp](std::vector<std::string> done, std::string err) mutable {
          self->state.reconfiguring = false;
          if (err.empty()) rp.deliver(std::move(done));
          else rp.deliver(caf::make_error(caf::sec::runtime_error, std::move(err)));
        };
        auto maker = std::move(chain.value());
        auto named = [&](const char* stage_name) { return std::find(names.begin(), names.end(), stage_name) != names.end(); };
        std::vector<stage> stages;
        if (named("scheduler"))
          stages.push_back([self, next](std::vector<std::string> d, stage_done k) {
            swap_scheduler(self, next, std::move(d), std::move(k));
          });
        // Admission holds a copy of the [speculative] section (admission_cfg): a reload that
        // changes which methods can run replaces it too, after the scheduler.
        const auto& spec_now = s.cfg.scheduler.speculative;
        const bool spec_changed = named("scheduler") && (next.scheduler.speculative.method != spec_now.method ||
                                                         next.scheduler.speculative.draft_model != spec_now.draft_model);
        if (named("admission") || spec_changed)
          stages.push_back([self, next](std::vector<std::string> d, stage_done k) {
            swap_admission(self, next, std::move(d), std::move(k));
          });
        if (named("cache"))
          stages.push_back([self, next](std::vector<std::string> d, stage_done k) {
            swap_cache(self, next, std::move(d), std::move(k));
          });
        if (named("router"))
          stages.push_back([self, next](std::vector<std::string> d, stage_done k) {
            swap_router(self, next, std::move(d), std::move(k));
          });
        if (named("streamer"))
          stages.push_back([self, next, maker](std::vector<std::string> d, stage_done k) {
            swap_filters(self, next, maker, std::move(d), std::move(k));
          });
        run_stages(std::make_shared<std::vector<stage>>(std::move(stages)), 0, {}, std::move(finish));
        return rp;
      },
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
                                                  std::shared_ptr<const text_codec> codec, caf::actor upstream) {
  if (!codec) return make_error("the pipeline needs a text codec");
  // Check what can be checked before anything runs.
  if (auto ok = check_parts(cfg); !ok) return make_error(ok.error());
  std::unique_ptr<pipeline> p(new pipeline(sys, cfg, codec));
  p->upstream_ = upstream;
  p->supervisor_ = sys.spawn(supervisor_fn, cfg, std::move(make), codec, p->cell_, std::move(upstream));
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
                                                  std::string backend, caf::actor upstream) {
  if (!m) return make_error("no model");
  auto codec = make_gguf_codec(m->file(), cfg.text);
  if (!codec) return make_error("the model's tokenizer: " + codec.error());
  if (cfg.model_name == "default" && !m->params().name.empty()) cfg.model_name = m->params().name;
  return start(sys, std::move(cfg), make_backend_maker(std::move(m), o, std::move(backend)), std::move(codec.value()),
               std::move(upstream));
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
  if (l.router && l.router != upstream_)
    self->wait_for(l.router);
  supervisor_ = nullptr;
  cell_->set({});
}

result<scheduler_stats> pipeline::get_scheduler_stats(std::chrono::milliseconds t) const {
  return ask<scheduler_stats>(sys_, caf::actor_cast<scheduler_actor>(links().scheduler), t, stats_atom::value);
}
result<router_stats> pipeline::get_router_stats(std::chrono::milliseconds t) const {
  return ask<router_stats>(sys_, caf::actor_cast<router_actor>(links().router), t, stats_atom::value);
}
result<admission_stats> pipeline::get_admission_stats(std::chrono::milliseconds t) const {
  return ask<admission_stats>(sys_, caf::actor_cast<admission_actor>(links().admission), t, stats_atom::value);
}
result<streamer_stats> pipeline::get_streamer_stats(std::chrono::milliseconds t) const {
  return ask<streamer_stats>(sys_, caf::actor_cast<streamer_actor>(links().streamer), t, stats_atom::value);
}
result<std::vector<std::string>> pipeline::reconfigure(const pipeline_config& next, const std::set<std::string>& stages,
                                                       std::chrono::milliseconds timeout) {
  if (!supervisor_) return make_error("the pipeline is not running");
  for (const auto& name : stages) {
    if (reload_stages().count(name)) continue;
    std::string known;
    for (const auto& k : reload_stages()) known += (known.empty() ? "" : ", ") + k;
    return make_error("unknown stage '" + name + "' (known: " + known + ")");
  }
  caf::scoped_actor self{sys_};
  result<std::vector<std::string>> out = make_error("no answer from the supervisor");
  self->request(supervisor_, timeout, reconfig_atom::value, next, std::vector<std::string>(stages.begin(), stages.end()))
      .receive([&](std::vector<std::string>& swapped) { out = std::move(swapped); },
               [&](caf::error& e) { out = make_error(detail::describe(e)); });
  if (out.ok()) {
    std::lock_guard<std::mutex> lock(cfg_mu_);
    if (stages.count("scheduler")) cfg_.scheduler = next.scheduler;
    if (stages.count("admission")) cfg_.admission = next.admission;
    if (stages.count("cache")) cfg_.cache = next.cache;
    if (stages.count("streamer")) cfg_.streamer.filters = next.streamer.filters;
    if (stages.count("router")) {
      auto numerics = std::move(cfg_.router.numerics);  // restart-only: the router keeps them too
      cfg_.router = next.router;
      cfg_.router.numerics = std::move(numerics);
    }
  }
  return out;
}

result<response_cache_stats> pipeline::get_cache_stats(std::chrono::milliseconds t) const {
  return ask<response_cache_stats>(sys_, caf::actor_cast<cache_actor>(links().cache), t, stats_atom::value);
}

}  // namespace troupe::actors

#include "actors/admission/admission.hpp"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include "actors/response_cache/response_cache.hpp"
#include "actors/admission/admission_state.hpp"
#include "actors/detail/caf_util.hpp"
#include "actors/supervisor/successor_link.hpp"
#include "actors/streamer/streamer.hpp"

namespace troupe::actors {

namespace {

struct admission_actor_state {
  std::shared_ptr<admission_state> adm;  // null once handed over
  pipeline_links links;
  detail::successor_link<admission_actor> next;
  // The admission actor when the policy is one (see admission_gate.hpp); shared with the exit
  // hook that stops it with this actor (unless handed over by then).
  std::shared_ptr<admission_gate> gate_cell = std::make_shared<admission_gate>();
  admission_gate& gate = *gate_cell;
  std::string gate_name;
  option_map gate_options;
  admission_gate_spawner gate_spawn;
  std::string gate_error;  // why there is none although the policy names one
  int32_t asking = 0;      // verdicts awaited from the admission actor
  // A handover waits for those verdicts: new submissions go to the successor meanwhile.
  bool handing_over = false;
  caf::typed_response_promise<admission_handover> handover_rp;
  static inline const char* name = "troupe.admission";
};

using self_ptr = admission_actor::stateful_pointer<admission_actor_state>;

void stop_gate(self_ptr self) {
  auto& st = self->state;
  if (!st.gate) return;
  self->demonitor(st.gate.address());
  caf::anon_send_exit(st.gate, caf::exit_reason::user_shutdown);
  st.gate = nullptr;
}

// Starts, keeps or stops the admission actor to match the policy in force.
void sync_gate(self_ptr self) {
  auto& st = self->state;
  const auto& cfg = st.adm->config();
  if (!st.adm->uses_actor()) {
    stop_gate(self);
    st.gate_name.clear();
    return;
  }
  if (st.gate && st.gate_name == cfg.policy && st.gate_options == cfg.policy_options) return;
  stop_gate(self);
  st.gate_name = cfg.policy;
  st.gate_options = cfg.policy_options;
  st.gate_spawn = nullptr;
  st.gate_error.clear();
  auto f = admission_actor_registry().find(cfg.policy);
  auto made = f ? f.value()(cfg) : result<admission_gate_spawner>(make_error(f.error()));
  if (!made || !made.value()) {
    st.gate_error = made ? "its factory made nothing" : made.error();
    spdlog::error("troupe: admission actor '{}' cannot start: {}", cfg.policy, st.gate_error);
    return;
  }
  st.gate_spawn = std::move(made.value());
  st.gate = st.gate_spawn(self->system());
  if (!st.gate) {
    st.gate_error = "its spawner returned no actor";
    return;
  }
  self->monitor(st.gate);
}

admission_handover take_handover(self_ptr self) {
  auto& st = self->state;
  st.next.hand_over();
  if (st.gate) self->demonitor(st.gate.address());
  admission_handover h{std::move(st.adm), std::move(st.gate), st.gate_name, st.gate_options, std::move(st.gate_spawn)};
  st.gate = nullptr;
  return h;
}

// A request admission has let through: the stream opens before the request can produce
// anything (both messages leave from here, and everything downstream is sent after this one is
// in the streamer's mailbox).
uint64_t let_in(self_ptr self, admission_decision& d, event_sink sink) {
  auto& st = self->state;
  const uint64_t id = d.request.id;
  self->send(caf::actor_cast<streamer_actor>(st.links.streamer), open_atom::value, d.open, std::move(sink));
  self->send(caf::actor_cast<cache_actor>(st.links.cache), lookup_atom::value, std::move(d.request));
  return id;
}

void verdict_in(self_ptr self, admission_decision held, admission_verdict v, event_sink sink,
                caf::typed_response_promise<submit_reply> rp) {
  auto& st = self->state;
  --st.asking;
  auto d = st.adm->answer(std::move(held), std::move(v));
  if (d.ok) rp.deliver(submit_reply{let_in(self, d, std::move(sink)), {}});
  else rp.deliver(submit_reply{0, std::move(d.error)});
  if (st.handing_over && st.asking == 0 && st.handover_rp.pending()) st.handover_rp.deliver(take_handover(self));
}

admission_actor::behavior_type admission_behavior(self_ptr self) {
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (!st.gate || dm.source != st.gate.address() || !st.gate_spawn) return;
    spdlog::error("troupe: admission actor '{}' stopped ({}); starting a new one", st.gate_name,
                  detail::describe(dm.reason));
    st.gate = st.gate_spawn(self->system());
    if (st.gate) self->monitor(st.gate);
  });
  return {
      [=](submit_atom, request_spec& spec, event_sink& sink) -> caf::result<submit_reply> {
        auto& st = self->state;
        if (!st.adm || st.handing_over) {  // handed over (or about to be): the successor answers
          auto rp = self->make_response_promise<submit_reply>();
          st.next.pass([self, rp, spec, sink](admission_actor& h) mutable {
            self->request(h, caf::infinite, submit_atom::value, std::move(spec), std::move(sink))
                .then([rp](submit_reply& r) mutable { rp.deliver(std::move(r)); },
                      [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
          });
          return rp;
        }
        auto d = st.adm->admit(spec, now_us());
        if (d.ask) {
          if (!st.gate) {
            admission_verdict no{false, errc::internal,
                                 "admission actor '" + st.gate_name + "' is not running: " + st.gate_error, 0};
            ++st.asking;
            auto rp = self->make_response_promise<submit_reply>();
            verdict_in(self, std::move(d), std::move(no), std::move(sink), rp);
            return rp;
          }
          ++st.asking;
          auto rp = self->make_response_promise<submit_reply>();
          auto ask = d.gate_ask;
          self->request(st.gate, admission_gate_timeout, admit_atom::value, std::move(ask))
              .then(
                  [self, d, sink, rp](admission_verdict& v) mutable {
                    verdict_in(self, std::move(d), std::move(v), std::move(sink), rp);
                  },
                  [self, d, sink, rp](caf::error& e) mutable {
                    admission_verdict no{false, errc::internal,
                                         "admission actor '" + self->state.gate_name +
                                             "' did not answer: " + detail::describe(e),
                                         0};
                    verdict_in(self, std::move(d), std::move(no), std::move(sink), rp);
                  });
          return rp;
        }
        if (!d.ok) return submit_reply{0, std::move(d.error)};
        return submit_reply{let_in(self, d, std::move(sink)), {}};
      },
      [=](closed_atom, uint64_t id, int32_t completion_tokens, const std::string& finish_reason) {
        auto& st = self->state;
        if (!st.adm)
          return st.next.pass([self, id, completion_tokens, finish_reason](admission_actor& h) {
            self->send(h, closed_atom::value, id, completion_tokens, finish_reason);
          });
        auto usage = st.adm->on_closed(id, now_us(), completion_tokens, finish_reason);
        if (usage && st.gate) self->send(st.gate, closed_atom::value, std::move(*usage));
      },
      [=](stats_atom) -> caf::result<admission_stats> {
        auto& st = self->state;
        if (st.adm) return st.adm->stats();
        if (st.next.successor()) return self->delegate(st.next.successor(), stats_atom::value);
        return admission_stats{};
      },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
      [=](handover_atom) -> caf::result<admission_handover> {
        auto& st = self->state;
        if (!st.adm || st.handing_over) return caf::make_error(caf::sec::runtime_error, "admission already handed over");
        st.handing_over = true;
        if (st.asking == 0) return take_handover(self);
        st.handover_rp = self->make_response_promise<admission_handover>();
        return st.handover_rp;
      },
      [=](forward_atom, caf::actor successor) { self->state.next.set(caf::actor_cast<admission_actor>(successor)); },
  };
}

admission_actor::behavior_type admission_fn(self_ptr self, admission_config cfg, std::shared_ptr<const text_codec> codec) {
  self->state.adm = std::make_shared<admission_state>(std::move(cfg), std::move(codec));
  sync_gate(self);
  self->attach_functor([cell = self->state.gate_cell] {
    if (*cell) caf::anon_send_exit(*cell, caf::exit_reason::user_shutdown);
  });
  return admission_behavior(self);
}

admission_actor::behavior_type successor_fn(self_ptr self, admission_config cfg, admission_handover from) {
  auto& st = self->state;
  st.adm = std::move(from.adm);
  st.gate = std::move(from.gate);
  st.gate_name = std::move(from.gate_name);
  st.gate_options = std::move(from.gate_options);
  st.gate_spawn = std::move(from.gate_spawn);
  if (st.gate) self->monitor(st.gate);
  // The supervisor made the new policy once before the swap, so this rarely fails; when it does,
  // the running policy stays and says so.
  const std::string wanted = cfg.policy;
  if (auto s = st.adm->reconfigure(std::move(cfg)); !s)
    spdlog::error("troupe: admission keeps policy '{}' (not '{}'): {}", st.adm->config().policy, wanted, s.error());
  sync_gate(self);
  self->attach_functor([cell = self->state.gate_cell] {
    if (*cell) caf::anon_send_exit(*cell, caf::exit_reason::user_shutdown);
  });
  return admission_behavior(self);
}

}  // namespace

admission_actor spawn_admission(caf::actor_system& sys, admission_config cfg, std::shared_ptr<const text_codec> codec) {
  return sys.spawn(admission_fn, std::move(cfg), std::move(codec));
}

admission_actor spawn_admission(caf::actor_system& sys, admission_config cfg, admission_handover from) {
  return sys.spawn(successor_fn, std::move(cfg), std::move(from));
}

}  // namespace troupe::actors

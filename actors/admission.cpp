#include "actors/admission.hpp"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include "actors/cache.hpp"
#include "actors/detail/successor_link.hpp"
#include "actors/streamer.hpp"

namespace troupe::actors {

namespace {

struct admission_actor_state {
  std::shared_ptr<admission_state> adm;  // null once handed over
  pipeline_links links;
  detail::successor_link<admission_actor> next;
  static inline const char* name = "troupe.admission";
};

using self_ptr = admission_actor::stateful_pointer<admission_actor_state>;

admission_actor::behavior_type admission_behavior(self_ptr self) {
  return {
      [=](submit_atom, request_spec& spec, event_sink& sink) -> caf::result<submit_reply> {
        auto& st = self->state;
        if (!st.adm) {  // handed over: the successor answers
          auto rp = self->make_response_promise<submit_reply>();
          st.next.pass([self, rp, spec, sink](admission_actor& h) mutable {
            self->request(h, caf::infinite, submit_atom::value, std::move(spec), std::move(sink))
                .then([rp](submit_reply& r) mutable { rp.deliver(std::move(r)); },
                      [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
          });
          return rp;
        }
        auto d = st.adm->admit(spec, now_us());
        if (!d.ok) return submit_reply{0, std::move(d.error)};
        const uint64_t id = d.request.id;
        // The stream opens before the request can produce anything: both messages leave from
        // here, and everything downstream is sent after this one is in the streamer's mailbox.
        self->send(caf::actor_cast<streamer_actor>(st.links.streamer), open_atom::value, d.open, std::move(sink));
        self->send(caf::actor_cast<cache_actor>(st.links.cache), lookup_atom::value, std::move(d.request));
        return submit_reply{id, {}};
      },
      [=](closed_atom, uint64_t id, int32_t completion_tokens, const std::string& finish_reason) {
        auto& st = self->state;
        if (!st.adm)
          return st.next.pass([self, id, completion_tokens, finish_reason](admission_actor& h) {
            self->send(h, closed_atom::value, id, completion_tokens, finish_reason);
          });
        st.adm->on_closed(id, now_us(), completion_tokens, finish_reason);
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
        if (!st.adm) return caf::make_error(caf::sec::runtime_error, "admission already handed over");
        st.next.hand_over();
        return admission_handover{std::move(st.adm)};
      },
      [=](forward_atom, caf::actor successor) { self->state.next.set(caf::actor_cast<admission_actor>(successor)); },
  };
}

admission_actor::behavior_type admission_fn(self_ptr self, admission_config cfg, std::shared_ptr<const text_codec> codec) {
  self->state.adm = std::make_shared<admission_state>(std::move(cfg), std::move(codec));
  return admission_behavior(self);
}

admission_actor::behavior_type successor_fn(self_ptr self, admission_config cfg, admission_handover from) {
  self->state.adm = std::move(from.adm);
  // The supervisor made the new policy once before the swap, so this rarely fails; when it does,
  // the running policy stays and says so.
  const std::string wanted = cfg.policy;
  if (auto s = self->state.adm->reconfigure(std::move(cfg)); !s)
    spdlog::error("troupe: admission keeps policy '{}' (not '{}'): {}", self->state.adm->config().policy, wanted,
                  s.error());
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

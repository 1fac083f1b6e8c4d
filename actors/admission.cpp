#include "actors/admission.hpp"

#include <caf/all.hpp>

#include "actors/cache.hpp"
#include "actors/streamer.hpp"

namespace troupe::actors {

namespace {

struct admission_actor_state {
  std::unique_ptr<admission_state> adm;
  pipeline_links links;
  static inline const char* name = "troupe.admission";
};

using self_ptr = admission_actor::stateful_pointer<admission_actor_state>;

admission_actor::behavior_type admission_fn(self_ptr self, admission_config cfg, std::shared_ptr<const text_codec> codec) {
  self->state.adm = std::make_unique<admission_state>(std::move(cfg), std::move(codec));
  return {
      [=](submit_atom, const request_spec& spec, event_sink& sink) -> submit_reply {
        auto& st = self->state;
        auto d = st.adm->admit(spec, now_us());
        if (!d.ok) return submit_reply{0, std::move(d.error)};
        const uint64_t id = d.request.id;
        // The stream opens before the request can produce anything: both messages leave from
        // here, and everything downstream is sent after this one is in the streamer's mailbox.
        self->send(caf::actor_cast<streamer_actor>(st.links.streamer), open_atom::value, d.open, std::move(sink));
        self->send(caf::actor_cast<cache_actor>(st.links.cache), lookup_atom::value, std::move(d.request));
        return submit_reply{id, {}};
      },
      [=](closed_atom, uint64_t id) { self->state.adm->on_closed(id, now_us()); },
      [=](stats_atom) { return self->state.adm->stats(); },
      [=](links_atom, pipeline_links& l) { self->state.links = std::move(l); },
  };
}

}  // namespace

admission_actor spawn_admission(caf::actor_system& sys, admission_config cfg, std::shared_ptr<const text_codec> codec) {
  return sys.spawn(admission_fn, std::move(cfg), std::move(codec));
}

}  // namespace troupe::actors

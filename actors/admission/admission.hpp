#pragma once
// The admission actor: the pipeline's front door. It answers a submission at once, with the
// request's id or with the reason it was refused (and when to retry), then opens the stream at
// the streamer and passes the request to the cache. Closed streams come back from the
// streamer, for the queue cap and the admission policy (with the tokens they generated).
#include <cstdint>

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/admission/gate.hpp"
#include "actors/admission/policy.hpp"
#include "actors/event_sink.hpp"
#include "actors/links.hpp"
#include "actors/request.hpp"
#include "actors/text_codec.hpp"

namespace troupe::actors {

using submit_atom = caf::atom_constant<caf::atom("submit")>;

// The answer to a submission: an id, or (id 0) the reason it was refused.
struct submit_reply {
  uint64_t id = 0;
  error_event error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_reply& x) {
  return f(caf::meta::type_name("submit_reply"), x.id, x.error);
}

// The answer to `stats`.
struct admission_stats {
  int64_t admitted = 0;
  int64_t rejected = 0;
  int64_t overloaded = 0;
  int64_t rate_limited = 0;
  int32_t pending = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_stats& x) {
  return f(caf::meta::type_name("admission_stats"), x.admitted, x.rejected, x.overloaded, x.rate_limited, x.pending);
}

class admission_state;  // admission_state.hpp

// Admission's state on its way to a successor (hot reload; in process only: a pointer).
struct admission_handover {
  std::shared_ptr<admission_state> adm;
  // The admission actor in use, if the policy is one (gate.hpp): the successor keeps
  // it when its name and options stay, else stops it.
  admission_gate gate;
  std::string gate_name;
  option_map gate_options;
  admission_gate_spawner gate_spawn;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::admission_handover)

namespace troupe::actors {

using admission_actor = caf::typed_actor<caf::replies_to<submit_atom, request_spec, event_sink>::with<submit_reply>,
                                         // id, completion tokens, finish reason ("" : failed)
                                         caf::reacts_to<closed_atom, uint64_t, int32_t, std::string>,
                                         caf::replies_to<stats_atom>::with<admission_stats>,
                                         caf::reacts_to<links_atom, pipeline_links>,
                                         caf::replies_to<handover_atom>::with<admission_handover>,
                                         caf::reacts_to<forward_atom, caf::actor>>;

admission_actor spawn_admission(caf::actor_system& sys, admission_config cfg, std::shared_ptr<const text_codec> codec);
// A successor on a predecessor's state (requests in flight, tenant buckets, ids) with new limits.
admission_actor spawn_admission(caf::actor_system& sys, admission_config cfg, admission_handover from);

}  // namespace troupe::actors

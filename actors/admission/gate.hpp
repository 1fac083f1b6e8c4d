#pragma once
// Admission actors: an admission policy that is an actor of its own. Where a policy
// (policy.hpp) is called inside the admission actor and must answer at once, an
// admission actor is asked by message and may take its time: it can keep a file or a database
// up to date, share its state with other actors, or run on a thread of its own (spawn it
// detached) without slowing the front door. Admission still does everything else: validation,
// the caps, the queue; it asks the actor only about requests it would admit, and tells it about
// every admitted request that closes (also those admitted before it took over).
//
// Chosen by name like a policy (`admission.policy`, with `admission.policy_options`); the names
// of admission actors and admission policies are one namespace. Registered by plugins
// (plugin_api.hpp: add_admission_actor) or in process (admission_actor_registry().add).
//
// The protocol (plain values; the actor may answer later with a response promise):
//   (admit_atom, admission_ask) -> admission_verdict    an answer within admission_gate_timeout,
//                                                      or the request is refused `internal`
//   (closed_atom, admission_usage)                     a request it may have admitted closed
// Admission watches the actor: if it stops, admission starts a new one from the same factory
// and refuses the requests that were waiting on the old one, naming it.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "actors/admission/policy.hpp"
#include "actors/links.hpp"

namespace troupe::actors {

using admit_atom = caf::atom_constant<caf::atom("admit")>;

using admission_gate = caf::typed_actor<caf::replies_to<admit_atom, admission_ask>::with<admission_verdict>,
                                        caf::reacts_to<closed_atom, admission_usage>>;

// How long admission waits for an admission actor's verdict.
inline constexpr std::chrono::milliseconds admission_gate_timeout{2000};

// Starts the actor: called once when the config takes effect (and again if the actor stops).
using admission_gate_spawner = std::function<admission_gate(caf::actor_system&)>;
// Reads and checks the options (`cfg.policy_options`) without starting anything; the error names
// the actor and the option. Also called to validate a config (`troupe config check`, reloads).
using admission_actor_factory = std::function<result<admission_gate_spawner>(const admission_config& cfg)>;

// The process-wide registry of admission actors (none built in).
named_registry<admission_actor_factory>& admission_actor_registry();

// Whether `cfg.policy` names an admission actor (else it should name a policy).
bool is_admission_actor(const std::string& name);
// Every name `admission.policy` may take: policies and actors.
std::vector<std::string> admission_policy_names();
// Checks `cfg.policy` and its options, whichever kind it names; an unknown name lists both kinds.
status validate_admission_policy(const admission_config& cfg);

}  // namespace troupe::actors

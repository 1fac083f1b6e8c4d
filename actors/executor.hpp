#pragma once
// The executor actor: owns the backend (and with it the KV memory) and runs one step per plan,
// answering with plain values. It never calls the scheduler. Runs detached (its own thread):
// forward() is long and CPU-heavy and must not starve CAF's scheduler threads. If the backend
// throws, the executor answers the step with an error and exits; the supervisor replaces it.
#include <functional>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>

#include "actors/executor_state.hpp"
#include "actors/step.hpp"
#include "model/backend.hpp"

namespace troupe::actors {

using step_atom = caf::atom_constant<caf::atom("step")>;
using info_atom = caf::atom_constant<caf::atom("info")>;

using executor_actor = caf::typed_actor<caf::replies_to<step_atom, step_plan>::with<step_result>,
                                        caf::replies_to<info_atom>::with<executor_info>>;

// Builds the executor's backend; called on the executor's thread, again after each restart.
using backend_maker = std::function<result<std::unique_ptr<model::backend>>()>;

// An executor whose backend failed to build answers `info` with that error and exits.
executor_actor spawn_executor(caf::actor_system& sys, backend_maker make);

}  // namespace troupe::actors

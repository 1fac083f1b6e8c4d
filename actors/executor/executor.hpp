#pragma once
// The executor actor: owns the backend (and with it the KV memory) and runs one step per plan,
// answering with plain values. It never calls the scheduler. Runs detached (its own thread):
// forward() is long and CPU-heavy and must not starve CAF's scheduler threads. If the backend
// throws, the executor answers the step with an error and exits; the supervisor replaces it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/scheduler/step.hpp"
#include "model/backend.hpp"

namespace troupe::actors {

using step_atom = caf::atom_constant<caf::atom("step")>;
using info_atom = caf::atom_constant<caf::atom("info")>;

// What the executor runs on, the answer to `info`.
struct executor_info {
  std::string backend;
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int32_t n_vocab = 0;
  int32_t n_ctx = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, executor_info& x) {
  return f(caf::meta::type_name("executor_info"), x.backend, x.n_blocks, x.block_size, x.n_vocab, x.n_ctx);
}

using executor_actor = caf::typed_actor<caf::replies_to<step_atom, step_plan>::with<step_result>,
                                        caf::replies_to<info_atom>::with<executor_info>>;

// Builds the executor's backend; called on the executor's thread, again after each restart.
using backend_maker = std::function<result<std::unique_ptr<model::backend>>()>;

class text_codec;

// An executor whose backend failed to build answers `info` with that error and exits. `codec`
// compiles structured-output constraints (null: constrained steps fail by name).
executor_actor spawn_executor(caf::actor_system& sys, backend_maker make,
                              std::shared_ptr<const text_codec> codec = nullptr);

}  // namespace troupe::actors

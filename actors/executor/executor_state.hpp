#pragma once
// The executor's work, without CAF: owns a backend, turns a step plan into a batch, runs it and
// samples. The only memory between steps is the token each sequence sampled in the previous
// step, which a pipelined plan refers to (step_entry::feed_last_sample). Exceptions from the
// backend pass through: the executor actor treats them as a fault and is replaced.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "actors/executor/executor.hpp"
#include "actors/scheduler/step.hpp"
#include "actors/text_codec.hpp"
#include "model/backend.hpp"
#include "structured/constraint.hpp"

namespace troupe::actors {

class executor_state {
 public:
  // `codec` compiles structured-output constraints; without one a constrained step fails by name.
  explicit executor_state(std::unique_ptr<model::backend> be, std::shared_ptr<const text_codec> codec = nullptr);

  executor_info info() const;
  step_result run(const step_plan& plan);
  model::backend& backend() { return *be_; }

 private:
  // A step whose rows the backend samples itself (backend::forward_sampled).
  step_result run_sampled(const step_plan& plan, const model::batch& b, const std::vector<int>& row_of,
                          step_result res, const std::vector<model::row_sampling>& rows);

  // A constrained sequence's matcher, advanced by each token sampled here; `error` when it could
  // not be made ready for this step's sample.
  struct constrained {
    structured::constraint_spec spec;
    std::unique_ptr<structured::matcher> m;
    uint64_t last_step = 0;
  };
  // The matcher of `e` positioned at its n_generated tokens (rebuilt from e.generated where this
  // executor has none, or one out of step); an error names why not.
  result<structured::matcher*> matcher_for(const step_entry& e, int32_t fed_last, uint64_t step);
  void forget_idle_matchers(uint64_t step);

  std::unique_ptr<model::backend> be_;
  std::shared_ptr<const text_codec> codec_;
  std::unordered_map<uint64_t, int32_t> last_sample_;  // samples of the previous step
  std::unordered_map<uint64_t, constrained> constrained_;
  std::vector<int32_t> eog_;                           // allowed where a constraint can end
};

}  // namespace troupe::actors

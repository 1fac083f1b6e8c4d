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
#include "model/backend.hpp"

namespace troupe::actors {

class executor_state {
 public:
  explicit executor_state(std::unique_ptr<model::backend> be);

  executor_info info() const;
  step_result run(const step_plan& plan);
  model::backend& backend() { return *be_; }

 private:
  // A step whose rows the backend samples itself (backend::forward_sampled).
  step_result run_sampled(const step_plan& plan, const model::batch& b, const std::vector<int>& row_of,
                          step_result res, const std::vector<model::row_sampling>& rows);

  std::unique_ptr<model::backend> be_;
  std::unordered_map<uint64_t, int32_t> last_sample_;  // samples of the previous step
};

}  // namespace troupe::actors

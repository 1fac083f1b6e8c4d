#pragma once
// The executor's work, without CAF: owns a backend, turns a step plan into a batch, runs it and
// samples. The only memory between steps is the token each sequence sampled in the previous
// step, which a pipelined plan refers to (step_entry::feed_last_sample). Exceptions from the
// backend pass through: the executor actor treats them as a fault and is replaced.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include <caf/meta/type_name.hpp>

#include "actors/step.hpp"
#include "model/backend.hpp"

namespace troupe::actors {

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

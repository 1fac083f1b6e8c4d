#pragma once
// The batching window shared by `static` and `window`: with nothing running, whether the
// requests waiting should start now or wait a little longer for company.
#include <algorithm>
#include <cstdint>

#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {

// True when enough requests wait (`min_batch`, at most the batch's max_num_seqs: a batch that
// cannot grow need not wait) or the longest-waiting one has waited `wait_us`.
inline bool idle_batch_ready(const batch_view& b, int64_t wait_us, int32_t min_batch) {
  return b.n_waiting >= std::min(std::max(1, min_batch), std::max(1, b.max_num_seqs)) || b.waited_us >= wait_us;
}

}  // namespace troupe::actors::policies

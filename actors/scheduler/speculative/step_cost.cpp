#include "actors/scheduler/speculative/step_cost.hpp"

#include <algorithm>

namespace troupe::actors {

namespace {
// Weight of a new measurement: steps on a shared machine are noisy; a handful of them settles it.
constexpr double ewma_weight = 0.25;
}  // namespace

void step_cost::record(int32_t n_tokens, int64_t us) {
  if (n_tokens <= 0 || us < 0) return;
  const auto i = static_cast<size_t>(std::min(n_tokens, max_tokens));
  if (avg_us_.size() <= i) avg_us_.resize(i + 1, -1.0);
  auto& a = avg_us_[i];
  a = a < 0 ? static_cast<double>(us) : (1 - ewma_weight) * a + ewma_weight * static_cast<double>(us);
}

std::optional<double> step_cost::time_us(int32_t n_tokens) const {
  const auto n = static_cast<size_t>(std::clamp(n_tokens, 1, max_tokens));
  size_t hi = n;
  while (hi < avg_us_.size() && avg_us_[hi] < 0) ++hi;
  if (hi >= avg_us_.size()) return std::nullopt;
  if (hi == n) return avg_us_[n];
  size_t lo = n;
  while (lo > 0 && avg_us_[lo] < 0) --lo;
  // Below every measurement: proportional to the tokens (the steepest a step's time grows). Not
  // the nearest time above: that would make every smaller step cost the same, so extra positions
  // look free and, once every sequence speculates, no plain step is ever measured to correct it.
  if (lo == 0) return avg_us_[hi] * static_cast<double>(n) / static_cast<double>(hi);
  const double f = static_cast<double>(n - lo) / static_cast<double>(hi - lo);
  return avg_us_[lo] + f * (avg_us_[hi] - avg_us_[lo]);
}

bool speculation_pays(const step_cost& cost, double expected_accepted, int32_t g, int32_t batch, int32_t n_tokens,
                      bool pipelined, double guess_us) {
  if (g <= 0 || expected_accepted <= 0) return false;
  const double gain_per_step = (1.0 + expected_accepted) / (pipelined ? 2.0 : 1.0) - 1.0;
  if (gain_per_step <= 0) return false;  // it would make fewer tokens per step than decoding plainly
  const auto t = cost.time_us(n_tokens);
  const auto t2 = cost.time_us(n_tokens + g);
  if (!t || !t2) return true;  // not measured yet: try, and learn
  const double extra = std::max(0.0, *t2 - *t) + std::max(0.0, guess_us);
  return gain_per_step * *t > std::max(1, batch) * extra;
}

}  // namespace troupe::actors

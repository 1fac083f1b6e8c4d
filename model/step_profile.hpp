#pragma once
// Where a backend's pure decode steps (one token per sequence, past its prompt) spend their time,
// phase by phase, summed over the steps seen while a profile is attached
// (cpu_backend::set_profile). For benchmarks: `troupe bench engine` prints it for batch 1 and 16.
#include <array>
#include <chrono>
#include <cstdint>

namespace troupe::model {

struct step_profile {
  // The work on each matmul's output rows (row_epilogue) and the norm of its input rows
  // (row_prologue) count with its matmul.
  enum phase { qkv, attention, wo, gate_up, down, head, other, n_phases };
  static constexpr std::array<const char*, n_phases> names = {
      "norm + Q/K/V matmul + biases, RoPE, K/V stores", "attention", "output projection matmul + residual add",
      "norm + gate/up matmul + SwiGLU", "down matmul + residual add", "output head (norm + matmul)",
      "embeddings, RoPE tables, setup"};

  std::array<double, n_phases> seconds{};
  int64_t steps = 0;
  int64_t tokens = 0;  // summed over the steps

  double total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
};

// Adds the time since the last lap (or construction) to a phase of an optional profile.
class phase_timer {
 public:
  explicit phase_timer(step_profile* p) : p_(p), last_(p ? clock::now() : clock::time_point{}) {}
  void lap(step_profile::phase ph) {
    if (!p_) return;
    const auto now = clock::now();
    p_->seconds[ph] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  using clock = std::chrono::steady_clock;
  step_profile* p_;
  clock::time_point last_;
};

}  // namespace troupe::model

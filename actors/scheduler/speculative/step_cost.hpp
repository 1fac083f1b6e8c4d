#pragma once
// When speculation pays, from the scheduler's own step timings (issue 23, "Turning itself off").
//
// step_cost keeps a running table of a step's wall time by the number of tokens it fed (an
// exponential moving average per token count). The rule (speculation_pays): let T = the step
// time at the step's token count n (the batch, plus the guesses of others already in the step), dT = T(n + g) - T(n) the extra time of g verified
// positions, B the sequences in the step, E = acceptance x g the tokens the guesses are expected
// to add, and c = 2 when the step is pipelined with others (a speculating sequence waits for its
// answer, so it is in every other step) else 1. Without speculation the batch makes B tokens per
// T; with it, (B - 1 + (1 + E) / c) per T + dT. Speculate only when that is more:
//     ((1 + E) / c - 1) x T > B x dT.
// At batch 1 on a memory-bound step dT is small and any useful acceptance pays; at batch 16 on
// a compute-bound CPU, dT x 16 outweighs what a few accepted tokens save, so nobody speculates
// there, at whatever batch size the measured times say, not a configured constant.
// Not known yet (no step measured at or above n + g): speculation is allowed, so that the table
// learns the cost (the first prompt chunks usually fill it above every decode batch anyway).
#include <cstdint>
#include <optional>
#include <vector>

namespace troupe::actors {

class step_cost {
 public:
  // Token counts above this share the last entry (the rule only asks about decode batches).
  static constexpr int32_t max_tokens = 1024;

  // A step that fed n_tokens took us microseconds.
  void record(int32_t n_tokens, int64_t us);
  // The expected time of a step of n_tokens, from the measured counts around it (linear
  // between the nearest measured below and above; below every measurement, proportional to the
  // nearest above: extra positions look their most expensive until a smaller step is measured);
  // nothing when no step of n_tokens or more was measured.
  std::optional<double> time_us(int32_t n_tokens) const;

 private:
  std::vector<double> avg_us_;  // by tokens fed; < 0: not measured
};

// The rule above. expected_accepted = E; g = the proposed positions; batch = B; n_tokens = n;
// pipelined: whether the step runs pipelined with others (c = 2).
// guess_us: what making the g guesses adds to the step's wall time (proposer::guess_cost_us), added
// to dT.
bool speculation_pays(const step_cost& cost, double expected_accepted, int32_t g, int32_t batch, int32_t n_tokens,
                      bool pipelined, double guess_us = 0.0);

}  // namespace troupe::actors

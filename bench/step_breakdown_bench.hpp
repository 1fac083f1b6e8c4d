#pragma once
// A decode step of `troupe bench engine`'s batched tests phase by phase (cpu_backend's profile of
// the last round), for its table and its --json document.
#include <array>
#include <cstdint>
#include <vector>

#include "bench/engine_bench.hpp"
#include "bench/read_ceiling.hpp"
#include "model/step_profile.hpp"

namespace troupe::bench::engine {

// The mean number of positions a decode step attends to when a sequence of `prompt` tokens
// generates `max_tokens`: the first comes from prefill, then a decode step at position p attends
// to p + 1 positions, p from prompt to prompt + max_tokens - 2. The batched tests' sequences run
// in lockstep (no stop token ends one early), so every step of theirs has this mean.
inline double mean_decode_context(int prompt, int max_tokens) { return prompt + 1 + (max_tokens - 2) / 2.0; }

// Short keys for step_profile's phases, in its order (for --json).
inline constexpr std::array<const char*, model::step_profile::n_phases> phase_keys = {
    "qkv", "attention", "wo", "gate_up", "down", "head", "other"};

// One profiled batch size's decode step, in milliseconds, with what its attention reads.
struct step_breakdown {
  int batch = 0;
  int64_t steps = 0;
  double step_ms = 0;                                      // mean wall time of a step
  std::array<double, model::step_profile::n_phases> ms{};  // mean per phase
  double outside_ms = 0;                                   // sampling, batch setup: the step outside forward
  double kv_bytes = 0;                                     // K/V bytes attention reads in a step
  double kv_gb_per_s() const {
    const double attention_ms = ms[model::step_profile::attention];
    return attention_ms > 0 ? kv_bytes / (attention_ms * 1e-3) / 1e9 : 0.0;
  }
};

// The profiled batch sizes of one configuration (those with steps).
std::vector<step_breakdown> breakdowns(const troupe_figures& r, const bench_options& o);

// Each configuration's decode steps phase by phase at every batch size (cpu_backend's profile of
// the last round), what attention's K/V reads reach against the streaming-read ceiling, and how
// each phase grows from batch 16 to 64.
void print_profiles(const troupe_figures& r, const bench_options& o, const read_ceiling& ceiling);

}  // namespace troupe::bench::engine

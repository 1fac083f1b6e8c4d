#include "bench/step_breakdown_bench.hpp"

#include <cstdio>
#include <string>

namespace troupe::bench::engine {

using namespace troupe::model;

namespace {

constexpr bool all_named(const std::array<const char*, step_profile::n_phases>& a) {
  for (const char* k : a)
    if (!k) return false;
  return true;
}
static_assert(all_named(phase_keys), "a step_profile phase without a key here");

}  // namespace

std::vector<step_breakdown> breakdowns(const troupe_figures& r, const bench_options& o) {
  std::vector<step_breakdown> out;
  for (const auto& pb : r.profiles) {
    const auto& p = pb.profile;
    if (p.steps == 0 || pb.step_seconds <= 0) continue;
    step_breakdown b;
    b.batch = pb.batch;
    b.steps = p.steps;
    b.step_ms = pb.step_seconds * 1e3;
    const double per = 1e3 / static_cast<double>(p.steps);
    for (size_t i = 0; i < b.ms.size(); ++i) b.ms[i] = p.seconds[i] * per;
    b.outside_ms = b.step_ms - p.total() * per;
    b.kv_bytes = static_cast<double>(pb.batch) * mean_decode_context(o.batch_prompt, o.batch_gen) *
                 static_cast<double>(r.kv_bytes_per_token);
    out.push_back(b);
  }
  return out;
}

void print_profiles(const troupe_figures& r, const bench_options& o, const read_ceiling& ceiling) {
  const auto bs = breakdowns(r, o);
  if (bs.empty()) return;
  std::printf("\n%s: a decode step by phase, ms (%% of the step); the mean of the last round's steps at each batch size\n\n",
              r.name().c_str());
  std::string head = "| phase |", rule = "|---|";
  for (const auto& b : bs) {
    head += " B=" + std::to_string(b.batch) + " |";
    rule += "---|";
  }
  std::printf("%s\n%s\n", head.c_str(), rule.c_str());
  auto row = [&](const char* what, auto value) {
    std::printf("| %s |", what);
    for (const auto& b : bs) std::printf(" %.3f (%.1f%%) |", value(b), 100.0 * value(b) / b.step_ms);
    std::printf("\n");
  };
  for (size_t i = 0; i < step_profile::n_phases; ++i)
    row(step_profile::names[i], [i](const step_breakdown& b) { return b.ms[i]; });
  row("sampling, batch setup (outside forward)", [](const step_breakdown& b) { return b.outside_ms; });
  std::printf("| whole step |");
  for (const auto& b : bs) std::printf(" %.3f |", b.step_ms);
  std::printf("\n| per token (step / B) |");
  for (const auto& b : bs) std::printf(" %.3f |", b.step_ms / b.batch);
  std::printf("\n| steps profiled |");
  for (const auto& b : bs) std::printf(" %lld |", static_cast<long long>(b.steps));
  std::printf("\n\nattention's K/V reads (%zu bytes a position, a mean of %.0f positions per sequence):\n",
              r.kv_bytes_per_token, mean_decode_context(o.batch_prompt, o.batch_gen));
  for (const auto& b : bs) {
    std::printf("  B=%d: %.1f MB a step in %.3f ms = %.1f GB/s", b.batch, b.kv_bytes / 1e6, b.ms[step_profile::attention],
                b.kv_gb_per_s());
    if (ceiling.gb_per_s > 0) std::printf(", %.0f%% of the %.1f GB/s streaming read", 100.0 * b.kv_gb_per_s() / ceiling.gb_per_s, ceiling.gb_per_s);
    std::printf("\n");
  }
  const step_breakdown *b16 = nullptr, *b64 = nullptr;
  for (const auto& b : bs) {
    if (b.batch == 16) b16 = &b;
    if (b.batch == 64) b64 = &b;
  }
  if (b16 && b64) {
    std::printf("from batch 16 to 64 (4x the tokens a step) each phase's step time grows:");
    for (size_t i = 0; i < step_profile::n_phases; ++i)
      if (b16->ms[i] > 0) std::printf(" %s %.2fx;", phase_keys[i], b64->ms[i] / b16->ms[i]);
    std::printf(" whole step %.2fx, so batch 64 makes %.2fx batch 16's tokens/s\n", b64->step_ms / b16->step_ms,
                4.0 * b16->step_ms / b64->step_ms);
  }
}

}  // namespace troupe::bench::engine

#pragma once
// What the files of `troupe bench engine` share: its options, each configuration's figures, where
// the run ran, and the floors the figures are held to. engine_bench.cpp measures and prints them,
// step_breakdown_bench.cpp a decode step phase by phase, engine_json_bench.cpp the --json document.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/cpu_name.hpp"
#include "bench/llama_runner.hpp"
#include "bench/read_ceiling.hpp"
#include "model/backend.hpp"
#include "model/kv_manager.hpp"
#include "model/loaded_model.hpp"
#include "model/matmul.hpp"
#include "model/sampler.hpp"
#include "model/step_profile.hpp"

namespace troupe::bench::engine {

struct bench_options {
  std::string model = model::default_model_path();
  std::string llama_bin = ".cache/llama.cpp/build/bin";
  int threads = 0;
  int prefill_tokens = 512;
  int decode_tokens = 128;
  int batch_prompt = 128;
  int batch_gen = 128;
  std::vector<int> batches = {1, 4, 16, 64};
  int repeats = 3;
  int batch_repeats = 5;
  // The long-context tests: a prompt of this many tokens prefilled, and decode_tokens decoded
  // after a prompt of this many (0 skips both).
  int long_tokens = 4096;
  int block_size = model::backend_options{}.block_size;  // KV block size in tokens (the server's default)
  bool skip_llama = false;
  std::string json;  // where --json writes the run's figures (empty: nowhere)
  // The quality table (quality_bench.hpp): windows of the eval text scored per path (0: none).
  std::string eval_text = "tests/fixtures/eval/gpl-3.txt";
  int eval_windows = 3;
  int eval_ctx = 256;
  std::string matmul = "both";
  std::string kv = "both";  // f16, q8 or both (q8: one more run, in the fast order when it runs)
  // How the decode tests sample (greedy by default, as llama.cpp's benches do); each request
  // draws with its own seed.
  model::sampling_params sampling;
};

inline std::string fixed2(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Troupe's figures in one matmul order, on a backend built for it.
struct troupe_figures {
  model::matmul_order order = model::matmul_order::llama_cpp;
  bool kv_q8 = false;
  std::string name() const {
    return std::string(model::matmul_order_name(order)) + " order" + (kv_q8 ? ", q8 K/V" : "");
  }
  std::vector<double> pp, tg;
  // Each decode run's figure as a percentage of the streaming-read ceiling measured just before
  // and after it (the higher of the two): the host's bandwidth drifts over minutes, and a ratio of
  // figures taken seconds apart is steadier than one of figures taken minutes apart.
  std::vector<double> tg_ceiling_percent, tg_ceiling_gb_per_s;
  std::vector<double> long_pp, long_tg;  // the long-context tests (empty when skipped)
  std::vector<std::pair<int, double>> agg;  // batch size, aggregate decode tokens/s
  std::vector<std::vector<double>> agg_rounds;  // per batch size (as agg), each round's figure
  std::vector<std::pair<int, std::vector<double>>> to_b1;  // batch size, each round's ratio to batch 1
  model::kv_usage peak;
  // The last round's decode steps at every batch size, phase by phase, and their mean wall time
  // (forward plus sampling and bookkeeping).
  struct profiled_batch {
    int batch = 0;
    model::step_profile profile;
    double step_seconds = 0;
  };
  std::vector<profiled_batch> profiles;
  size_t kv_bytes_per_token = 0;
  int32_t block_size = 0;
  // How many bytes 2 MiB pages back (model/huge_pages.hpp): of the packed weights, and of the
  // buffer the paired ceiling reads (0 of 0 where there is none).
  size_t packed_bytes = 0, packed_huge_bytes = 0, read_bytes = 0, read_huge_bytes = 0;
  double at(int b) const {
    for (auto [bb, tps] : agg)
      if (bb == b) return tps;
    return 0.0;
  }
};

// The engine issue's floors, each configuration against them: prefill and single-sequence
// decode >= 0.8x llama.cpp, aggregate decode at batch 16 >= 4x the same configuration's batch 1
// (the median of the rounds' ratios) and >= 3x llama-batched-bench's figure.
struct floor_check {
  std::string what;  // "prefill vs llama.cpp", ...
  bool measured = false;
  double value = 0, floor = 0;
  bool met() const { return measured && value >= floor; }
};

std::vector<floor_check> floors_of(const troupe_figures& r, const llama_figures& llama);

// Where and when a run ran: the figures move with the machine and its neighbours' load.
struct machine_state {
  std::string cpu = cpu_name();
  std::string started_at, finished_at;  // UTC, ISO 8601
  std::array<double, 3> load_start{}, load_end{};  // 1, 5 and 15 minute load averages
};

// The K/V bytes one decode step of the long-context test reads (the mean over its steps).
double long_kv_bytes(const troupe_figures& r, const bench_options& o);
// The ceiling of a decode step at depth long_tokens: a read of the weights and of that K/V.
double long_ceiling_tps(const read_ceiling& c, const troupe_figures& r, const bench_options& o);

}  // namespace troupe::bench::engine

#pragma once
// llama.cpp's own benchmarks (llama-bench, llama-batched-bench from scripts/build-llama-cpp.sh) run
// on the same GGUF with the same thread count, for `troupe bench engine` to print beside its figures.
#include <string>
#include <utility>
#include <vector>

namespace troupe::bench {

// One llama-bench test's figures: mean and standard deviation of its repetitions' tokens/s.
struct llama_test {
  double tps = 0, sd = 0;
};

struct llama_figures {
  llama_test pp, tg;            // llama-bench pp<prefill_tokens> / tg<decode_tokens>
  llama_test long_pp, long_tg;  // pp<long_tokens>, and tg<decode_tokens> at depth long_tokens
  std::vector<std::pair<int, double>> batched;  // B → aggregate decode tokens/s
  std::string note;
};

// What to run: the tests `troupe bench engine` runs, in llama.cpp's terms.
struct llama_run {
  std::string llama_bin;  // the folder with llama-bench and llama-batched-bench
  std::string model;
  int threads = 0, repeats = 3;
  int prefill_tokens = 512, decode_tokens = 128;
  int long_tokens = 0;  // pp<long_tokens>, and tg<decode_tokens> at that depth (0: neither)
  int batch_prompt = 128, batch_gen = 128;
  std::vector<int> batches;
};

// Runs them (progress on stderr); a figure it could not read is 0, and `note` says so, or says
// that llama.cpp is not built.
llama_figures run_llama(const llama_run& run);

}  // namespace troupe::bench

#pragma once
// The quality table of `troupe bench engine` (issue 25, "a quality gate for every fast path"):
// model/eval.cpp's KL divergence, top-1 agreement and perplexity ratio of each fast path against
// the bit-exact order with f32 K/V, on the text that tests/model/eval_real_model_test.cpp gates
// on, measured in the same run as the speed figures. Not a subcommand of its own: `troupe eval`
// is the tool; this is its table for the bench.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/eval.hpp"
#include "model/loaded_model.hpp"
#include "net/json_writer.hpp"

namespace troupe::bench {

struct quality_figures {
  std::string text;     // the file scored
  int32_t n_ctx = 0;    // tokens per window
  int32_t chunks = 0;   // windows scored
  int64_t scored = 0;   // tokens scored
  double ppl_reference = 0;
  std::vector<std::pair<std::string, model::kl_summary>> rows;  // each path against the reference
  std::vector<std::string> notes;  // paths without a row, and why
  std::string error;               // set when it could not run
};

// Scores `chunks` windows of n_ctx tokens of the text at `path` with the reference (llama.cpp
// order, f32 K/V) and each fast path, on `threads` threads.
quality_figures measure_quality(const model::loaded_model& lm, const std::string& path, int threads, int32_t n_ctx,
                                int32_t chunks);
void print_quality(const quality_figures& q);
// The "quality" member of --json's document.
void write_quality(net::json_writer& w, const quality_figures& q);

}  // namespace troupe::bench

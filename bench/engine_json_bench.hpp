#pragma once
// --json: every figure the run prints, in one document. The layout is documented in --help
// (engine_json_help) and read by bench/plot.py; a change to it that a reader must know of
// bumps k_engine_json_version (engine_json_bench.cpp).
#include <string>
#include <vector>

#include "bench/engine_bench.hpp"
#include "bench/llama_runner.hpp"
#include "bench/quality_bench.hpp"
#include "bench/read_ceiling.hpp"
#include "model/loaded_model.hpp"

namespace troupe::bench::engine {

// The layout, for --help.
extern const char* const engine_json_help;

// The document; `quality` is null when the quality table did not run.
std::string engine_json(const bench_options& o, const model::loaded_model& lm, int threads, const machine_state& m,
                        const read_ceiling& ceiling, const std::vector<troupe_figures>& runs,
                        const llama_figures& llama, const quality_figures* quality, long rss_kib);

}  // namespace troupe::bench::engine

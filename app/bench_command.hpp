#pragma once
// `troupe bench <name>`: benchmarks register under the bench command the same way top-level
// commands do (in bench/: engine_bench.cpp with its parts beside it, serve_bench.cpp, cache_bench.cpp).
#include "app/command.hpp"

namespace troupe::app {

std::vector<command_entry>& bench_registry();

struct register_bench {
  register_bench(std::string name, std::string description, command_setup setup) {
    bench_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace troupe::app

#pragma once
// `troupe bench serve`: the serving pipeline in process (no network) under load. Callable from
// any CLI wiring; app/cmd_bench_serve.cpp registers it as `troupe bench serve`.
//
// What one run prints:
//  1. the same workload under `static` and under `policy` (fcfs): N concurrent clients, Poisson
//     arrivals, mixed prompt and output lengths. For each: throughput, TTFT and inter-token
//     latency p50/p95/p99, KV utilization and the batch-size distribution; then the ratio of
//     the two throughputs (continuous batching should reach >= 2x static);
//  2. the share of wall time spent outside the backend's step with 16 sequences decoding
//     (target < 5%);
//  3. TTFT with and without prefix caching for requests sharing a long system prompt;
//  4. (with `policies`) the run-1 workload under each named policy in turn, and a table side by
//     side: throughput, TTFT, inter-token latency, batch size, preemptions, and the batch size
//     limit in force at the end (an adaptive policy moves it).
#include <cstdint>
#include <string>

namespace troupe::actors {

struct bench_serve_options {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int threads = 0;               // backend threads; 0: all cores
  int clients = 16;              // concurrent clients
  int requests = 48;             // requests per load run
  double rate = 16.0;            // Poisson arrival rate, requests/s (an arrival waits for a free client)
  int prompt_min = 8;            // prompt lengths, uniform, in tokens
  int prompt_max = 32;
  int short_min = 8;             // output lengths: a mix of short answers ...
  int short_max = 16;
  int long_min = 96;             // ... and long ones
  int long_max = 128;
  double long_share = 0.2;       // share of long answers
  int max_batched_tokens = 256;
  int64_t kv_mb = 128;           // KV memory of the backend
  std::string policy = "fcfs";   // the continuous-batching policy compared with `static`
  double static_wait_ms = 1000;  // static batching waits this long to fill a batch (its batch_wait_ms)
  bool compare = true;           // run 1
  bool overhead = true;          // run 2
  bool prefix = true;            // run 3
  int overhead_tokens = 24;      // tokens each of the 16 sequences generates in run 2
  int system_words = 160;        // length of the shared system prompt in run 3 (~1.3 tokens a word)
  int prefix_requests = 5;
  std::string policies;          // run 4: comma-separated policy names, e.g. "fcfs,adaptive,window,bucketed"
  std::string policy_opts;       // options by policy, e.g. "adaptive.target_itl_ms=80,window.window_ms=50"
  uint64_t seed = 1;
};

// Returns 0 when it ran (whether or not targets were met: it prints that), 1 on an error.
int run_bench_serve(const bench_serve_options& o);

}  // namespace troupe::actors

// `troupe bench serve`: the serving pipeline in process under load (see actors/bench_serve.hpp).
#include <CLI/CLI.hpp>

#include <memory>

#include "actors/bench_serve.hpp"
#include "app/bench_command.hpp"

namespace {
troupe::app::register_bench reg("serve", "Serving pipeline under load: static vs continuous batching, latency, prefix caching",
                                [](CLI::App& sub) {
  auto o = std::make_shared<troupe::actors::bench_serve_options>();
  sub.add_option("--model", o->model, "GGUF model file")->capture_default_str();
  sub.add_option("--threads", o->threads, "backend threads (0: all cores)")->capture_default_str();
  sub.add_option("--clients", o->clients, "concurrent clients")->capture_default_str();
  sub.add_option("--requests", o->requests, "requests per load run")->capture_default_str();
  sub.add_option("--rate", o->rate, "Poisson arrival rate, requests/s")->capture_default_str();
  sub.add_option("--prompt-min", o->prompt_min, "shortest prompt, tokens")->capture_default_str();
  sub.add_option("--prompt-max", o->prompt_max, "longest prompt, tokens")->capture_default_str();
  sub.add_option("--short-min", o->short_min, "shortest short answer, tokens")->capture_default_str();
  sub.add_option("--short-max", o->short_max, "longest short answer, tokens")->capture_default_str();
  sub.add_option("--long-min", o->long_min, "shortest long answer, tokens")->capture_default_str();
  sub.add_option("--long-max", o->long_max, "longest long answer, tokens")->capture_default_str();
  sub.add_option("--long-share", o->long_share, "share of long answers")->capture_default_str();
  sub.add_option("--max-batched-tokens", o->max_batched_tokens, "tokens per engine step")->capture_default_str();
  sub.add_option("--kv-mb", o->kv_mb, "KV memory, MiB")->capture_default_str();
  sub.add_option("--policy", o->policy, "continuous-batching policy compared with static")->capture_default_str();
  sub.add_option("--static-wait-ms", o->static_wait_ms, "how long static batching waits to fill a batch")
      ->capture_default_str();
  sub.add_option("--overhead-tokens", o->overhead_tokens, "tokens per sequence in the overhead run")->capture_default_str();
  sub.add_option("--system-words", o->system_words, "words in the shared system prompt")->capture_default_str();
  sub.add_option("--prefix-requests", o->prefix_requests, "requests in the prefix-caching run")->capture_default_str();
  sub.add_option("--seed", o->seed, "workload seed")->capture_default_str();
  sub.add_option("--policies", o->policies, "run 4: these policies side by side, e.g. fcfs,adaptive,window,bucketed");
  sub.add_option("--policy-opt", o->policy_opts, "policy options, e.g. adaptive.target_itl_ms=80,window.window_ms=50");
  auto* no_compare = sub.add_flag("--no-compare", "skip static vs continuous");
  auto* no_overhead = sub.add_flag("--no-overhead", "skip the overhead run");
  auto* no_prefix = sub.add_flag("--no-prefix", "skip the prefix-caching run");
  return [o, no_compare, no_overhead, no_prefix]() {
    o->compare = !*no_compare;
    o->overhead = !*no_overhead;
    o->prefix = !*no_prefix;
    return troupe::actors::run_bench_serve(*o);
  };
});
}  // namespace

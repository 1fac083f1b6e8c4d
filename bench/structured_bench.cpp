// `troupe bench structured`: what structured outputs cost a batch, in the serving pipeline in
// process (no network). Two runs of 16 requests at once on the same prompts and lengths:
//   free   16 unconstrained requests (greedy, max_tokens N, ignore_eos)
//   mix    the same with half of them constrained to a JSON Schema (an array of N/3 integers,
//          which takes about N tokens)
// alternated `--rounds` times, each keeping its fastest round; for each: aggregate tokens/s, the
// free requests' own tokens/s, the mean step time and the sampling time per step (which holds
// the masks' cost); then the ratios of the two runs. The constrained requests must not slow the
// free ones: their rate in `mix` against `free`.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/client.hpp"
#include "actors/runtime.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "app/bench_command.hpp"
#include "bench/cpu_name.hpp"
#include "model/llama_model.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::actors;
using clock_type = std::chrono::steady_clock;

struct structured_options {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int threads = 0;
  int batch = 16;
  int tokens = 128;
  int rounds = 3;
};


struct run_figures {
  double wall_s = 0;
  int64_t tokens = 0, free_tokens = 0;
  double free_rate = 0;  // mean over the free requests of their own tokens/s (first token to last)
  int64_t steps = 0;
  double step_ms = 0, sample_ms_per_step = 0;
  int errors = 0;
  std::string sample_output;  // one constrained request's text
};

run_figures drive(pipeline& p, int batch, int tokens, bool mix) {
  run_figures f;
  client c(p);
  auto before = p.get_scheduler_stats();
  std::vector<std::unique_ptr<stream>> streams;
  std::vector<bool> constrained;
  const auto t0 = clock_type::now();
  for (int i = 0; i < batch; ++i) {
    request_spec s;
    s.messages = {{"user", "List some numbers, request " + std::to_string(i) + ".", {}, {}, {}}};
    s.max_tokens = tokens;
    const bool con = mix && i % 2 == 1;
    if (con) {
      s.constraint = {structured::kind::json_schema,
                      R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":99},"minItems":)" +
                          std::to_string(tokens / 3) + R"(,"maxItems":)" + std::to_string(tokens / 3) + "}"};
    } else {
      s.ignore_eos = true;
    }
    s.cache = cache::cache_choice::refused;
    streams.push_back(c.submit(s));
    constrained.push_back(con);
  }
  std::vector<std::thread> readers;
  std::vector<int64_t> counts(static_cast<size_t>(batch));
  std::vector<double> rates(static_cast<size_t>(batch));
  std::vector<std::string> texts(static_cast<size_t>(batch));
  std::vector<int> errs(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i)
    readers.emplace_back([&, i] {
      clock_type::time_point first{}, last{};
      while (auto e = streams[static_cast<size_t>(i)]->next(std::chrono::minutes(10))) {
        if (auto* t = std::get_if<token_event>(&*e)) {
          last = clock_type::now();
          if (counts[static_cast<size_t>(i)]++ == 0) first = last;
          texts[static_cast<size_t>(i)] += t->text;
        } else if (auto* d = std::get_if<done_event>(&*e)) {
          texts[static_cast<size_t>(i)] += d->text;
          break;
        } else {
          errs[static_cast<size_t>(i)] = 1;
          std::fprintf(stderr, "  request %d failed: %s\n", i, std::get<error_event>(*e).message.c_str());
          break;
        }
      }
      const double span = std::chrono::duration<double>(last - first).count();
      if (counts[static_cast<size_t>(i)] > 1 && span > 0) rates[static_cast<size_t>(i)] = (counts[static_cast<size_t>(i)] - 1) / span;
    });
  for (auto& r : readers) r.join();
  f.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  auto after = p.get_scheduler_stats();
  int n_free = 0;
  for (int i = 0; i < batch; ++i) {
    f.tokens += counts[static_cast<size_t>(i)];
    f.errors += errs[static_cast<size_t>(i)];
    if (!constrained[static_cast<size_t>(i)]) {
      f.free_tokens += counts[static_cast<size_t>(i)];
      f.free_rate += rates[static_cast<size_t>(i)];
      ++n_free;
    } else if (f.sample_output.empty()) {
      f.sample_output = texts[static_cast<size_t>(i)];
    }
  }
  f.free_rate /= std::max(1, n_free);
  if (before && after) {
    f.steps = after->steps - before->steps;
    const double fwd = static_cast<double>(after->forward_us - before->forward_us) * 1e-3;
    const double smp = static_cast<double>(after->sample_us - before->sample_us) * 1e-3;
    if (f.steps > 0) {
      f.step_ms = (fwd + smp) / static_cast<double>(f.steps);
      f.sample_ms_per_step = smp / static_cast<double>(f.steps);
    }
  }
  return f;
}

int run_structured_bench(const structured_options& o) {
  auto m = model::llama_model::load(o.model);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().c_str());
    return 1;
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::printf("troupe bench structured: %s, CPU %s, %d backend threads; %d requests at once, %d tokens each\n",
              o.model.c_str(), cpu_name().c_str(), o.threads > 0 ? o.threads : static_cast<int>(hw), o.batch, o.tokens);
  runtime rt;
  pipeline_config cfg;
  cfg.scheduler.max_num_seqs = o.batch;
  cfg.cache.enabled = false;
  cfg.admission.max_pending = 100000;
  cfg.streamer.buffer_tokens = 0;
  model::backend_options bo;
  bo.n_threads = o.threads;
  bo.kv_bytes = int64_t{256} << 20;
  bo.matmul = model::matmul_order::fast;  // what `troupe serve` runs (config/troupe.toml)
  auto p = pipeline::start(rt.system(), cfg, m.value(), bo);
  if (!p) {
    std::fprintf(stderr, "error: %s\n", p.error().c_str());
    return 1;
  }
  drive(**p, 2, 8, true);  // warm-up: the schema compiled, the threads started
  // The two runs alternate `rounds` times and each keeps its fastest round: this machine's
  // neighbours move a step's time by more than the masks do.
  run_figures runs[2];
  const char* names[2] = {"free", "mix"};
  std::printf("\n  %-9s %9s %8s %12s %9s %14s %7s\n", "run", "tokens", "tok/s", "free tok/s", "step ms", "sampling ms", "steps");
  for (int round = 0; round < o.rounds; ++round)
    for (int k = 0; k < 2; ++k) {
      auto r = drive(**p, o.batch, o.tokens, k == 1);
      std::printf("  %-4s #%d   %9lld %8.1f %12.1f %9.2f %14.3f %7lld%s\n", names[k], round + 1,
                  static_cast<long long>(r.tokens), r.tokens / r.wall_s, r.free_rate, r.step_ms, r.sample_ms_per_step,
                  static_cast<long long>(r.steps), r.errors ? "  (errors!)" : "");
      if (round == 0 || r.step_ms < runs[k].step_ms) runs[k] = std::move(r);
    }
  const auto& a = runs[0];
  const auto& b = runs[1];
  std::printf("\n  fastest round of each:");
  std::printf("\n  masks' cost per step (mix sampling - free sampling): %.3f ms = %.1f%% of a %d-sequence step of the free run\n",
              b.sample_ms_per_step - a.sample_ms_per_step,
              a.step_ms > 0 ? 100.0 * (b.sample_ms_per_step - a.sample_ms_per_step) / a.step_ms : 0.0, o.batch);
  std::printf("  step time mix / free: %.3f; the free requests' rate mix / free: %.3f (1.0: not slowed)\n",
              a.step_ms > 0 ? b.step_ms / a.step_ms : 0.0, a.free_rate > 0 ? b.free_rate / a.free_rate : 0.0);
  std::printf("  a constrained output: %.120s%s\n", b.sample_output.c_str(), b.sample_output.size() > 120 ? "..." : "");
  return a.errors + b.errors == 0 ? 0 : 1;
}

app::register_bench reg("structured", "What structured outputs cost a batch of 16 (free vs half constrained)",
                        [](CLI::App& sub) {
                          auto o = std::make_shared<structured_options>();
                          sub.add_option("--model,-m", o->model, "GGUF model file")->capture_default_str();
                          sub.add_option("--threads", o->threads, "Backend threads (0 = all cores)");
                          sub.add_option("--batch", o->batch, "Requests at once")->capture_default_str();
                          sub.add_option("--tokens", o->tokens, "Tokens per request")->capture_default_str();
                          sub.add_option("--rounds", o->rounds, "Rounds of the two runs (each keeps its fastest)")->capture_default_str();
                          return [o]() { return run_structured_bench(*o); };
                        });

}  // namespace

}  // namespace troupe::bench

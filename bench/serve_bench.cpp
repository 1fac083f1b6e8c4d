// `troupe bench serve`: the serving pipeline in process (no network) under load.
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
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "actors/client.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "app/bench_command.hpp"
#include "model/llama_model.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::actors;

struct serve_options {
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

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(idx));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

struct run_result {
  std::string label;
  int requests = 0;
  int errors = 0;
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  double wall_s = 0;
  std::vector<double> ttft_ms, itl_ms;
  scheduler_stats stats;
  double tokens_per_s() const { return wall_s > 0 ? static_cast<double>(generated) / wall_s : 0; }
};

struct work_item {
  request_spec spec;
  double arrival_s = 0;
};

std::vector<work_item> make_workload(const serve_options& o, int n_vocab) {
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1e9);
  std::uniform_real_distribution<double> u(0, 1);
  auto uni = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(std::max(1, hi - lo + 1))); };
  std::vector<work_item> w;
  double t = 0;
  for (int i = 0; i < o.requests; ++i) {
    work_item it;
    // Ordinary-text ids from the lower vocabulary: no control tokens.
    const int n = uni(o.prompt_min, o.prompt_max);
    for (int k = 0; k < n; ++k) it.spec.prompt_tokens.push_back(100 + static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min(n_vocab - 100, 30000))));
    it.spec.max_tokens = u(rng) < o.long_share ? uni(o.long_min, o.long_max) : uni(o.short_min, o.short_max);
    it.spec.ignore_eos = true;  // output lengths as drawn, so both policies do the same work
    it.arrival_s = t;
    t += gap(rng);
    w.push_back(std::move(it));
  }
  return w;
}

// N client threads take the arrivals in order; an arrival waits for a free client.
run_result drive(const pipeline& p, const std::vector<work_item>& work, int clients, const std::string& label) {
  run_result r;
  r.label = label;
  client c(p);
  std::mutex mu;
  std::atomic<size_t> next{0};
  const auto t0 = clock_type::now();
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= work.size()) return;
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<clock_type::duration>(
                                             std::chrono::duration<double>(work[i].arrival_s)));
      const auto sent = clock_type::now();
      auto s = c.submit(work[i].spec);
      std::vector<double> itl;
      double ttft = -1;
      auto last = sent;
      completion out;
      for (;;) {
        auto e = s->next(std::chrono::minutes(10));
        if (!e) break;
        const auto now = clock_type::now();
        if (std::holds_alternative<token_event>(*e)) {
          if (ttft < 0)
            ttft = ms_between(sent, now);
          else
            itl.push_back(ms_between(last, now));
          last = now;
        }
        if (add_event(out, *e)) break;
      }
      std::lock_guard<std::mutex> lock(mu);
      ++r.requests;
      if (!out.ok()) {
        ++r.errors;
        std::fprintf(stderr, "  request failed: %s: %s\n", out.error.code.c_str(), out.error.message.c_str());
        continue;
      }
      r.generated += static_cast<int64_t>(out.tokens.size());
      r.prompt_tokens += out.usage.prompt_tokens;
      if (ttft >= 0) r.ttft_ms.push_back(ttft);
      r.itl_ms.insert(r.itl_ms.end(), itl.begin(), itl.end());
    }
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < clients; ++k) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  r.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (auto st = p.get_scheduler_stats(); st.ok()) r.stats = *st;
  return r;
}

void print_run(const run_result& r) {
  const auto& s = r.stats;
  std::printf("\n[%s] %d requests (%d failed): %lld tokens generated (%lld prompt) in %.1f s = %.1f tokens/s\n",
              r.label.c_str(), r.requests, r.errors, static_cast<long long>(r.generated),
              static_cast<long long>(r.prompt_tokens), r.wall_s, r.tokens_per_s());
  std::printf("  TTFT ms          p50 %8.1f  p95 %8.1f  p99 %8.1f\n", pct(r.ttft_ms, 50), pct(r.ttft_ms, 95),
              pct(r.ttft_ms, 99));
  std::printf("  inter-token ms   p50 %8.1f  p95 %8.1f  p99 %8.1f\n", pct(r.itl_ms, 50), pct(r.itl_ms, 95),
              pct(r.itl_ms, 99));
  const double steps = static_cast<double>(std::max<int64_t>(1, s.steps));
  std::printf("  KV utilization   mean %5.1f%%  peak %5.1f%% of %d blocks\n", 100.0 * s.kv_util_sum / steps,
              s.kv_blocks_total ? 100.0 * s.kv_blocks_peak / s.kv_blocks_total : 0.0, s.kv_blocks_total);
  double mean_b = 0;
  for (size_t b = 0; b < s.batch_hist.size(); ++b) mean_b += static_cast<double>(b) * static_cast<double>(s.batch_hist[b]);
  mean_b /= steps;
  std::printf("  batch size       mean %5.1f sequences over %lld steps; distribution:", mean_b,
              static_cast<long long>(s.steps));
  const int edges[] = {1, 2, 4, 8, 12, 16, 24, 32, 1 << 30};
  for (size_t k = 0; k + 1 < std::size(edges); ++k) {
    int64_t n = 0;
    for (size_t b = static_cast<size_t>(edges[k]); b < s.batch_hist.size() && b < static_cast<size_t>(edges[k + 1]); ++b)
      n += s.batch_hist[b];
    if (n == 0) continue;
    if (edges[k + 1] - edges[k] == 1)
      std::printf(" %d:%.0f%%", edges[k], 100.0 * static_cast<double>(n) / steps);
    else if (edges[k + 1] == 1 << 30)
      std::printf(" %d+:%.0f%%", edges[k], 100.0 * static_cast<double>(n) / steps);
    else
      std::printf(" %d-%d:%.0f%%", edges[k], edges[k + 1] - 1, 100.0 * static_cast<double>(n) / steps);
  }
  std::printf("\n  backend step     %.1f%% of wall time (sampling %.1f%%); %lld preemptions; %lld padding tokens\n",
              100.0 * static_cast<double>(s.forward_us) * 1e-6 / r.wall_s,
              100.0 * static_cast<double>(s.sample_us) * 1e-6 / r.wall_s, static_cast<long long>(s.preemptions),
              static_cast<long long>(s.pad_tokens));
  std::printf("  batch size limit %d at the end\n", s.max_num_seqs);
  std::fflush(stdout);
}

// "adaptive.target_itl_ms=80,window.window_ms=50": options by policy name.
using options_by_policy = std::map<std::string, policy_options>;
result<options_by_policy> parse_policy_opts(const std::string& spec) {
  options_by_policy out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto dot = item.find('.'), eq = item.find('=');
    if (dot == std::string::npos || eq == std::string::npos || eq < dot + 2)
      return make_error("--policy-opt '" + item + "': expected policy.key=value");
    char* end = nullptr;
    const std::string value = item.substr(eq + 1);
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') return make_error("--policy-opt '" + item + "': the value is not a number");
    out[item.substr(0, dot)].values[item.substr(dot + 1, eq - dot - 1)] = v;
  }
  return out;
}

result<std::unique_ptr<pipeline>> start_pipeline(runtime& rt, const serve_options& o,
                                                 const std::shared_ptr<model::llama_model>& m, const std::string& policy,
                                                 bool prefix_caching, int max_num_seqs,
                                                 const options_by_policy& opts = {}) {
  pipeline_config cfg;
  cfg.scheduler.policy = policy;
  if (policy == "static") cfg.scheduler.policy_opts.values["batch_wait_ms"] = o.static_wait_ms;
  if (auto it = opts.find(policy); it != opts.end())
    for (const auto& [k, v] : it->second.values) cfg.scheduler.policy_opts.values[k] = v;
  cfg.scheduler.max_num_seqs = max_num_seqs;
  cfg.scheduler.max_batched_tokens = o.max_batched_tokens;
  cfg.scheduler.prefix_caching = prefix_caching;
  cfg.cache.enabled = false;  // measure the engine, not the response cache
  cfg.admission.max_pending = 100000;
  cfg.admission.max_tokens_cap = 8192;
  cfg.streamer.buffer_tokens = 0;  // the clients keep up; no flow control in the way
  model::backend_options bo;
  bo.n_threads = o.threads;
  bo.kv_bytes = o.kv_mb << 20;
  return pipeline::start(rt.system(), cfg, m, bo);
}

// Returns 0 when it ran (whether or not targets were met: it prints that), 1 on an error.
int run_serve_bench(const serve_options& o) {
  auto m = model::llama_model::load(o.model);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().c_str());
    return 1;
  }
  const auto& hp = m.value()->params();
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  std::printf("troupe bench serve: %s (%d layers, vocab %d), %d backend threads, %d clients, %d requests per run, "
              "Poisson arrivals at %.1f/s\n",
              o.model.c_str(), hp.n_layer, hp.n_vocab, o.threads > 0 ? o.threads : static_cast<int>(hw), o.clients,
              o.requests, o.rate);
  std::printf("workload: prompts %d-%d tokens; outputs %d-%d tokens (%.0f%%) or %d-%d tokens (%.0f%%)\n", o.prompt_min,
              o.prompt_max, o.short_min, o.short_max, 100 * (1 - o.long_share), o.long_min, o.long_max,
              100 * o.long_share);
  auto popts = parse_policy_opts(o.policy_opts);
  if (!popts) {
    std::fprintf(stderr, "error: %s\n", popts.error().c_str());
    return 1;
  }
  runtime rt;
  const auto work = make_workload(o, hp.n_vocab);
  bool ok = true;

  if (o.compare) {
    std::printf("\n== 1. static vs %s, %d clients ==\n", o.policy.c_str(), o.clients);
    std::printf("static = a dense batch of up to %d: it waits up to %.0f ms to fill, no one joins once it decodes, "
                "and members that finish keep their slot until the last one does\n",
                o.clients, o.static_wait_ms);
    std::vector<run_result> runs;
    for (const std::string& pol : {std::string("static"), o.policy}) {
      auto p = start_pipeline(rt, o, m.value(), pol, true, o.clients, *popts);
      if (!p) {
        std::fprintf(stderr, "error: %s\n", p.error().c_str());
        return 1;
      }
      runs.push_back(drive(**p, work, o.clients, pol));
      print_run(runs.back());
      ok = ok && runs.back().errors == 0;
    }
    const double ratio = runs[0].tokens_per_s() > 0 ? runs[1].tokens_per_s() / runs[0].tokens_per_s() : 0;
    std::printf("\n  %s / static throughput: %.2fx (target >= 2x): %s\n", o.policy.c_str(), ratio,
                ratio >= 2.0 ? "met" : "NOT met");
  }

  if (o.overhead) {
    std::printf("\n== 2. time outside the backend step, 16 sequences decoding ==\n");
    auto p = start_pipeline(rt, o, m.value(), o.policy, true, 16);
    if (!p) {
      std::fprintf(stderr, "error: %s\n", p.error().c_str());
      return 1;
    }
    std::vector<work_item> w;
    std::mt19937 rng(static_cast<uint32_t>(o.seed));
    for (int i = 0; i < 16; ++i) {
      work_item it;
      for (int k = 0; k < 16; ++k) it.spec.prompt_tokens.push_back(100 + static_cast<int32_t>(rng() % 20000));
      it.spec.max_tokens = o.overhead_tokens;
      it.spec.ignore_eos = true;
      w.push_back(std::move(it));
    }
    auto before = (*p)->get_scheduler_stats();
    auto r = drive(**p, w, 16, o.policy + ", 16 at once");
    if (!before.ok()) return 1;
    const double fwd = static_cast<double>(r.stats.forward_us - before->forward_us) * 1e-6;
    const double smp = static_cast<double>(r.stats.sample_us - before->sample_us) * 1e-6;
    const double outside = 1.0 - fwd / r.wall_s;
    std::printf("  wall %.2f s, backend forward %.2f s, sampling %.2f s over %lld steps\n", r.wall_s, fwd, smp,
                static_cast<long long>(r.stats.steps - before->steps));
    std::printf("  outside the backend step: %.2f%% of wall time (target < 5%%): %s; of that, sampling %.2f%%, "
                "actors, client and idle %.2f%%\n",
                100 * outside, outside < 0.05 ? "met" : "NOT met", 100 * smp / r.wall_s,
                100 * (r.wall_s - fwd - smp) / r.wall_s);
    ok = ok && r.errors == 0;
  }

  if (o.prefix) {
    std::printf("\n== 3. TTFT with a shared system prompt, prefix caching on and off ==\n");
    static const char* words[] = {"the", "service", "answers", "questions", "about", "orders", "shipping",
                                  "returns", "and", "accounts", "politely", "with", "short", "clear", "facts"};
    std::string system = "You are a support assistant. Rules:";
    std::mt19937 rng(static_cast<uint32_t>(o.seed));
    for (int i = 0; i < o.system_words; ++i) system += std::string(" ") + words[rng() % std::size(words)];
    double warm[2] = {0, 0}, cold[2] = {0, 0};
    int32_t prompt_len = 0;
    for (int on = 1; on >= 0; --on) {
      auto p = start_pipeline(rt, o, m.value(), o.policy, on == 1, 16);
      if (!p) {
        std::fprintf(stderr, "error: %s\n", p.error().c_str());
        return 1;
      }
      client c(**p);
      std::vector<double> ttfts;
      for (int i = 0; i < o.prefix_requests; ++i) {
        request_spec s;
        s.messages = {{"system", system}, {"user", "Question " + std::to_string(i) + ": where is my parcel?"}};
        s.max_tokens = 2;
        const auto t0 = clock_type::now();
        auto st = c.submit(s);
        double ttft = 0;
        completion out;
        while (auto e = st->next(std::chrono::minutes(5))) {
          if (std::holds_alternative<token_event>(*e) && ttft == 0) ttft = ms_between(t0, clock_type::now());
          if (add_event(out, *e)) break;
        }
        if (!out.ok()) {
          std::fprintf(stderr, "  request failed: %s\n", out.error.message.c_str());
          ok = false;
          continue;
        }
        prompt_len = out.usage.prompt_tokens;
        ttfts.push_back(ttft);
        if (i == 0) cold[on] = ttft;
        if (on && i == o.prefix_requests - 1)
          std::printf("  prefix cache served %d of %d prompt tokens of the last request\n", out.usage.cached_prompt_tokens,
                      out.usage.prompt_tokens);
      }
      std::vector<double> rest(ttfts.begin() + (ttfts.empty() ? 0 : 1), ttfts.end());
      warm[on] = pct(rest, 50);
    }
    std::printf("  prompt %d tokens; TTFT median over requests 2..%d: with prefix caching %.1f ms, without %.1f ms "
                "(%.1fx); first request %.1f / %.1f ms\n",
                prompt_len, o.prefix_requests, warm[1], warm[0], warm[1] > 0 ? warm[0] / warm[1] : 0.0, cold[1],
                cold[0]);
  }
  if (!o.policies.empty()) {
    std::printf("\n== 4. the run-1 workload under each policy, %d clients, max_num_seqs %d ==\n", o.clients, o.clients);
    std::vector<run_result> runs;
    std::stringstream ss(o.policies);
    std::string pol;
    while (std::getline(ss, pol, ',')) {
      if (pol.empty()) continue;
      std::string desc;
      if (auto it = popts->find(pol); it != popts->end())
        for (const auto& [k, v] : it->second.values) {
          char num[32];
          std::snprintf(num, sizeof num, "%g", v);
          desc += (desc.empty() ? "" : ", ") + k + "=" + num;
        }
      auto p = start_pipeline(rt, o, m.value(), pol, true, o.clients, *popts);
      if (!p) {
        std::fprintf(stderr, "error: %s\n", p.error().c_str());
        return 1;
      }
      runs.push_back(drive(**p, work, o.clients, desc.empty() ? pol : pol + " (" + desc + ")"));
      print_run(runs.back());
      ok = ok && runs.back().errors == 0;
    }
    std::printf("\n  %-10s %8s %9s %9s %8s %8s %8s %7s %8s %6s\n", "policy", "tok/s", "TTFT p50", "TTFT p95", "ITL p50",
                "ITL p95", "ITL p99", "batch", "preempt", "limit");
    for (const auto& r : runs) {
      const auto& s = r.stats;
      double mean_b = 0;
      for (size_t b = 0; b < s.batch_hist.size(); ++b)
        mean_b += static_cast<double>(b) * static_cast<double>(s.batch_hist[b]);
      mean_b /= static_cast<double>(std::max<int64_t>(1, s.steps));
      std::printf("  %-10s %8.1f %9.1f %9.1f %8.1f %8.1f %8.1f %7.1f %8lld %6d\n", s.policy.c_str(), r.tokens_per_s(),
                  pct(r.ttft_ms, 50), pct(r.ttft_ms, 95), pct(r.itl_ms, 50), pct(r.itl_ms, 95), pct(r.itl_ms, 99),
                  mean_b, static_cast<long long>(s.preemptions), s.max_num_seqs);
    }
  }
  return ok ? 0 : 1;
}

troupe::app::register_bench reg("serve", "Serving pipeline under load: static vs continuous batching, latency, prefix caching",
                                [](CLI::App& sub) {
  auto o = std::make_shared<serve_options>();
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
    return run_serve_bench(*o);
  };
});

}  // namespace

}  // namespace troupe::bench

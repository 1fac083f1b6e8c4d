// `troupe bench router`: the router stage at scale, in process, with no model.
//
// A discrete-event simulation in simulated time: N engine replicas (8, 16, 32, 64 by default),
// each a modelled engine, driven through the real actors::router_state with the real routing
// policies from routing_policy_registry(). What is modelled and what is real:
//  - real: every placement, every step output passed back (router_state::enqueue, on_output,
//    on_report, take_effects), the policies, the router's prefix summary and load counts;
//  - modelled: each replica is a continuous-batching engine (up to --max-seqs sequences, a token
//    budget of --step-tokens per step, chunked prefill, decodes first) whose step takes
//    --step-base-ms + --step-token-us per token fed; it holds a prefix cache of --cache-blocks
//    blocks of 16 tokens with LRU eviction, keyed by the same chained block hashes as the engine's
//    (model::block_hash), so a prompt whose leading blocks the replica holds prefills only the
//    rest. No KV-capacity limit other than --max-seqs, no preemption, no network delay.
// Workload: --prefixes shared prefixes (system prompts) of --prefix-min..max tokens, popularity
// Zipf(--zipf); each request = one prefix + a unique suffix + an output length, Poisson arrivals
// at --rate requests/s per replica. The same workload (same seed) for every policy at a given
// replica count.
//
// Printed per policy and replica count: aggregate throughput in simulated time (generated
// tokens/s), prefix-hit rate (prompt tokens served from the replicas' caches), TTFT and end-to-end
// latency p50/p99 (simulated), the spread of requests over replicas, and the router's own speed
// on this CPU, wall clock: requests placed per second of enqueue during the run, and the router
// alone — the run's calls replayed on a fresh router_state — in requests and tokens per second.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <ctime>
#include <unordered_map>
#include <vector>

#include "actors/router/router_state.hpp"
#include "app/bench_command.hpp"
#include "bench/cpu_name.hpp"
#include "model/kv_block_pool.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::actors;

struct router_bench_options {
  std::string replicas = "8,16,32,64";
  std::string policies = "round_robin,least_loaded,prefix_affinity";
  int requests_per_replica = 400;
  double rate = 22.0;            // requests/s per replica (Poisson): past what a replica serves without prefix hits
  int prefixes = 1024;           // distinct shared prefixes
  double zipf = 0.8;             // popularity exponent of the prefixes (0: uniform)
  int prefix_min = 256, prefix_max = 768;
  int suffix_min = 32, suffix_max = 128;
  int output_min = 64, output_max = 192;
  double step_base_ms = 8.0;     // a step's fixed cost
  double step_token_us = 40.0;   // and its cost per token fed (prefill chunk or decode)
  int max_seqs = 32;             // sequences a replica runs at once
  int step_tokens = 1024;        // tokens per step (chunked prefill)
  int cache_blocks = 4096;       // prefix-cache blocks per replica (16 tokens each)
  int64_t report_ms = 250;       // load reports, as cluster.report_ms
  double max_imbalance = -1;     // prefix_affinity's options; < 0: the policy's default
  double balance_ratio = -1;
  uint64_t seed = 1;
};

constexpr int32_t block_size = 16;

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(idx));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

std::vector<uint64_t> block_hashes(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> out;
  uint64_t prev = 0;
  for (size_t at = 0; at + block_size <= tokens.size(); at += block_size) {
    prev = model::block_hash(prev, tokens.data() + at, block_size);
    out.push_back(prev);
  }
  return out;
}


// --- workload ---------------------------------------------------------------------------------

struct sim_request {
  double arrival_s = 0;
  int32_t prefix = 0;
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
};

std::vector<sim_request> make_workload(const router_bench_options& o, int replicas) {
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(replicas));
  auto uni = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint64_t>(std::max(1, hi - lo + 1))); };
  // The prefixes: distinct random token runs (ids above the control tokens).
  std::mt19937_64 prng(o.seed);
  std::vector<std::vector<int32_t>> prefixes(static_cast<size_t>(o.prefixes));
  for (auto& p : prefixes) {
    p.resize(static_cast<size_t>(o.prefix_min + static_cast<int>(prng() % static_cast<uint64_t>(
                                                    std::max(1, o.prefix_max - o.prefix_min + 1)))));
    for (auto& t : p) t = 100 + static_cast<int32_t>(prng() % 40000);
  }
  std::vector<double> weight(prefixes.size());
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 1.0 / std::pow(static_cast<double>(i + 1), o.zipf);
  std::discrete_distribution<int32_t> pick(weight.begin(), weight.end());
  std::exponential_distribution<double> gap(o.rate * replicas);

  std::vector<sim_request> w(static_cast<size_t>(o.requests_per_replica) * static_cast<size_t>(replicas));
  double t = 0;
  for (auto& r : w) {
    t += gap(rng);
    r.arrival_s = t;
    r.prefix = pick(rng);
    r.prompt = prefixes[static_cast<size_t>(r.prefix)];
    const int suffix = uni(o.suffix_min, o.suffix_max);
    for (int k = 0; k < suffix; ++k) r.prompt.push_back(100 + static_cast<int32_t>(rng() % 40000));
    r.max_tokens = uni(o.output_min, o.output_max);
  }
  return w;
}

// --- a modelled engine replica ----------------------------------------------------------------

struct sim_seq {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  int32_t done = 0;       // prompt tokens computed or found in the cache
  int32_t generated = 0;
  int32_t chunk = 0;      // tokens fed in the step in flight
};

class sim_replica {
 public:
  sim_replica(uint64_t id, const router_bench_options& o) : id_(id), o_(o) {}

  uint64_t id() const { return id_; }
  bool busy() const { return busy_; }
  void add(const admitted_request& r) {
    sim_seq s;
    s.id = r.id;
    s.prompt = r.prompt;
    s.max_tokens = r.max_tokens;
    waiting_.push_back(std::move(s));
  }

  // Plans the next step; returns its duration in seconds, or a negative number when idle.
  double start_step() {
    while (!waiting_.empty() && static_cast<int>(running_.size()) < o_.max_seqs) {
      sim_seq s = std::move(waiting_.front());
      waiting_.pop_front();
      // The leading blocks held in the cache need no prefill (the last prompt token is always
      // computed: its logits give the first output token).
      int32_t hit = 0;
      for (uint64_t h : block_hashes(s.prompt)) {
        auto it = cache_.find(h);
        if (it == cache_.end()) break;
        lru_.splice(lru_.end(), lru_, it->second);
        hit += block_size;
      }
      s.done = std::min(hit, static_cast<int32_t>(s.prompt.size()) - 1);
      hit_tokens_ += s.done;
      prompt_tokens_ += static_cast<int64_t>(s.prompt.size());
      running_.push_back(std::move(s));
    }
    int budget = o_.step_tokens;
    int fed = 0;
    for (auto& s : running_) {  // decodes first
      s.chunk = 0;
      if (s.done == static_cast<int32_t>(s.prompt.size()) && budget > 0) {
        s.chunk = 1;
        --budget;
        ++fed;
      }
    }
    for (auto& s : running_) {  // then prefill chunks, in admission order
      if (s.done == static_cast<int32_t>(s.prompt.size()) || budget <= 0) continue;
      s.chunk = std::min(budget, static_cast<int>(s.prompt.size()) - s.done);
      budget -= s.chunk;
      fed += s.chunk;
    }
    busy_ = fed > 0;
    if (!busy_) return -1;
    ++steps_;
    batch_sum_ += static_cast<int64_t>(running_.size());
    return (o_.step_base_ms + o_.step_token_us * 1e-3 * fed) * 1e-3;
  }

  // The step in flight ends: its tokens, finishes.
  step_output finish_step() {
    step_output out;
    for (auto& s : running_) {
      if (s.chunk == 0) continue;
      const bool decoding = s.done == static_cast<int32_t>(s.prompt.size());
      if (!decoding) {
        s.done += s.chunk;
        if (s.done < static_cast<int32_t>(s.prompt.size())) continue;
        remember(s.prompt);  // the prompt's blocks stay in the prefix cache
      }
      ++s.generated;
      out.tokens.push_back(token_out{s.id, 1000 + s.generated, 0.0f, {}});
      if (s.generated >= s.max_tokens) {
        seq_finished f;
        f.id = s.id;
        f.reason = finish::length;
        f.usage.prompt_tokens = static_cast<int32_t>(s.prompt.size());
        f.usage.completion_tokens = s.generated;
        out.finished.push_back(std::move(f));
      }
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const sim_seq& s) { return s.generated >= s.max_tokens; }),
                   running_.end());
    finished_ += static_cast<int64_t>(out.finished.size());
    busy_ = false;
    return out;
  }

  load_report report() const {
    load_report r;
    r.waiting = static_cast<int32_t>(waiting_.size());
    r.running = static_cast<int32_t>(running_.size());
    r.kv_blocks_total = o_.cache_blocks;
    int64_t used = 0;
    for (const auto& s : running_)
      used += (static_cast<int64_t>(s.prompt.size()) + s.generated + block_size - 1) / block_size;
    r.kv_blocks_available = static_cast<int32_t>(std::max<int64_t>(0, o_.cache_blocks - used));
    r.max_num_seqs = o_.max_seqs;
    r.finished = finished_;
    return r;
  }

  int64_t hit_tokens() const { return hit_tokens_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  double mean_batch() const { return steps_ ? static_cast<double>(batch_sum_) / static_cast<double>(steps_) : 0; }

 private:
  void remember(const std::vector<int32_t>& tokens) {
    for (uint64_t h : block_hashes(tokens)) {
      auto it = cache_.find(h);
      if (it != cache_.end()) {
        lru_.splice(lru_.end(), lru_, it->second);
        continue;
      }
      lru_.push_back(h);
      cache_.emplace(h, std::prev(lru_.end()));
      if (static_cast<int>(cache_.size()) > o_.cache_blocks) {
        cache_.erase(lru_.front());
        lru_.pop_front();
      }
    }
  }

  uint64_t id_;
  const router_bench_options& o_;
  std::deque<sim_seq> waiting_;
  std::vector<sim_seq> running_;
  bool busy_ = false;
  std::list<uint64_t> lru_;  // least recently used first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> cache_;
  int64_t hit_tokens_ = 0, prompt_tokens_ = 0, finished_ = 0, steps_ = 0, batch_sum_ = 0;
};

// --- the simulation ---------------------------------------------------------------------------

struct sim_result {
  std::string policy;
  int replicas = 0;
  int requests = 0, failed = 0, stale = 0;
  int64_t generated = 0;
  double span_s = 0;            // first arrival to last finish, simulated
  double hit_rate = 0;          // prompt tokens from the replicas' prefix caches
  std::vector<double> ttft_ms, e2e_ms;
  double mean_batch = 0;
  double spread = 0;            // the busiest replica's requests / the mean
  int64_t placements = 0;       // router_state's count (no migrations here: equal to requests)
  double enqueue_s = 0, output_s = 0, other_s = 0;  // wall time inside router_state calls
  double replay_wall_s = 0, replay_cpu_s = 0;       // the router alone, replaying this run's calls (best of 3)
  bool replay_same = true;                          // and it placed every request where the run did
  double sim_wall_s = 0;
};

using wall_clock = std::chrono::steady_clock;

struct timed {
  double& into;
  wall_clock::time_point t0 = wall_clock::now();
  explicit timed(double& s) : into(s) {}
  ~timed() { into += std::chrono::duration<double>(wall_clock::now() - t0).count(); }
};

// One call the simulation made on router_state, kept to replay on a router alone.
struct router_call {
  enum kind_t { enqueue, output, report } kind = enqueue;
  int64_t now_us = 0;
  uint64_t replica = 0;
  admitted_request request;
  step_output out;
  load_report load;
};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The router alone: a fresh router_state with the same policy takes the recorded calls in the
// recorded order (so it makes the same decisions), timed as one block, best of `repeats`; the
// requests are copied out beforehand. Returns whether it placed as many requests on each replica.
bool replay(const router_config& cfg, const routing_options& popts, int n_replicas, const std::vector<router_call>& calls,
            const router_stats& want, int repeats, double& best_wall, double& best_cpu) {
  bool same = true;
  best_wall = best_cpu = 0;
  for (int k = 0; k < repeats; ++k) {
    auto policy = routing_policy_registry().make(cfg.policy, popts);
    if (!policy) return false;
    router_state router(cfg, std::move(policy.value()));
    for (int i = 0; i < n_replicas; ++i) (void)router.add_replica("sim-" + std::to_string(i), block_size, 0);
    (void)router.take_effects();
    std::vector<admitted_request> requests;
    for (const auto& c : calls)
      if (c.kind == router_call::enqueue) requests.push_back(c.request);
    size_t next = 0;
    const auto w0 = wall_clock::now();
    const double c0 = thread_cpu_s();
    for (const auto& c : calls) {
      switch (c.kind) {
        case router_call::enqueue: router.enqueue(std::move(requests[next++]), c.now_us); break;
        case router_call::output: router.on_output(c.replica, c.out); break;
        case router_call::report: router.on_report(c.replica, c.load, c.now_us); break;
      }
      (void)router.take_effects();
    }
    const double cpu = thread_cpu_s() - c0;
    const double wall = std::chrono::duration<double>(wall_clock::now() - w0).count();
    if (k == 0 || wall < best_wall) best_wall = wall;
    if (k == 0 || cpu < best_cpu) best_cpu = cpu;
    const router_stats got = router.stats();
    same = same && got.placed == want.placed && got.replicas.size() == want.replicas.size();
    for (size_t i = 0; same && i < got.replicas.size(); ++i) same = got.replicas[i].placed == want.replicas[i].placed;
  }
  return same;
}

result<sim_result> simulate(const router_bench_options& o, const std::string& policy_name, int n_replicas,
                            const std::vector<sim_request>& work) {
  routing_options popts;
  if (policy_name == "prefix_affinity") {
    if (o.max_imbalance >= 0) popts.values["max_imbalance"] = o.max_imbalance;
    if (o.balance_ratio >= 0) popts.values["balance_ratio"] = o.balance_ratio;
  }
  auto policy = routing_policy_registry().make(policy_name, popts);
  if (!policy) return make_error(policy.error());
  router_config cfg;
  cfg.policy = policy_name;
  cfg.policy_opts = popts;
  cfg.use_local = false;
  cfg.report_ms = o.report_ms;
  cfg.dead_after_ms = int64_t{1} << 40;  // nobody dies here
  router_state router(cfg, std::move(policy.value()));

  sim_result res;
  res.policy = policy_name;
  res.replicas = n_replicas;
  res.requests = static_cast<int>(work.size());
  const auto wall0 = wall_clock::now();

  const auto us = [](double s) { return static_cast<int64_t>(std::llround(s * 1e6)); };
  std::vector<std::unique_ptr<sim_replica>> reps;
  std::map<uint64_t, size_t> index_of;  // router id -> reps index
  {
    timed t(res.other_s);
    for (int i = 0; i < n_replicas; ++i) {
      const uint64_t id = router.add_replica("sim-" + std::to_string(i), block_size, 0);
      index_of[id] = reps.size();
      reps.push_back(std::make_unique<sim_replica>(id, o));
    }
    (void)router.take_effects();
  }

  // Events in simulated time: (time, order of scheduling, kind, argument).
  enum kind : int { arrival = 0, step_done = 1, report = 2 };
  struct event {
    double t;
    uint64_t seq;
    int kind;
    size_t arg;
    bool operator>(const event& e) const { return t != e.t ? t > e.t : seq > e.seq; }
  };
  std::priority_queue<event, std::vector<event>, std::greater<event>> q;
  uint64_t order = 0;
  const auto schedule = [&](double t, int k, size_t arg) { q.push(event{t, order++, k, arg}); };
  for (size_t i = 0; i < work.size(); ++i) schedule(work[i].arrival_s, arrival, i);
  schedule(static_cast<double>(o.report_ms) * 1e-3, report, 0);

  std::vector<router_call> calls;
  std::vector<double> first_token(work.size(), -1);
  size_t ended = 0;
  double last_end = 0;
  const auto start_if_idle = [&](size_t r, double now) {
    if (reps[r]->busy()) return;
    const double d = reps[r]->start_step();
    if (d >= 0) schedule(now + d, step_done, r);
  };
  const auto apply = [&](router_effects fx, double now) {
    for (auto& [rid, req] : fx.place) {
      const size_t r = index_of.at(rid);
      reps[r]->add(req);
      start_if_idle(r, now);
    }
    res.stale += static_cast<int>(fx.drop.size());
    for (const auto& t : fx.to_streamer.tokens) {
      auto& ft = first_token[t.id - 1];
      if (ft < 0) {
        ft = now;
        res.ttft_ms.push_back((now - work[t.id - 1].arrival_s) * 1e3);
      }
      ++res.generated;
    }
    for (const auto& f : fx.to_streamer.finished) {
      res.e2e_ms.push_back((now - work[f.id - 1].arrival_s) * 1e3);
      ++ended;
      last_end = now;
    }
    for (const auto& f : fx.to_streamer.failed) {
      std::fprintf(stderr, "  request %llu failed: %s\n", static_cast<unsigned long long>(f.id), f.message.c_str());
      ++res.failed;
      ++ended;
    }
  };

  while (!q.empty() && ended < work.size()) {
    const event e = q.top();
    q.pop();
    const double now = e.t;
    if (e.kind == arrival) {
      const sim_request& w = work[e.arg];
      admitted_request r;
      r.id = e.arg + 1;  // request ids start at 1, as admission's do
      r.prompt = w.prompt;
      r.max_tokens = w.max_tokens;
      r.tenant = "bench";
      r.arrival_us = us(now);
      router_call c;
      c.kind = router_call::enqueue;
      c.now_us = us(now);
      c.request = r;
      calls.push_back(std::move(c));
      router_effects fx;
      {
        timed t(res.enqueue_s);
        router.enqueue(std::move(r), us(now));
        fx = router.take_effects();
      }
      apply(std::move(fx), now);
    } else if (e.kind == step_done) {
      const size_t r = e.arg;
      const step_output out = reps[r]->finish_step();
      router_call c;
      c.kind = router_call::output;
      c.replica = reps[r]->id();
      c.out = out;
      calls.push_back(std::move(c));
      router_effects fx;
      {
        timed t(res.output_s);
        router.on_output(reps[r]->id(), out);
        fx = router.take_effects();
      }
      apply(std::move(fx), now);
      start_if_idle(r, now);
    } else {
      {
        timed t(res.other_s);
        for (const auto& rep : reps) {
          router_call c;
          c.kind = router_call::report;
          c.now_us = us(now);
          c.replica = rep->id();
          c.load = rep->report();
          router.on_report(c.replica, c.load, c.now_us);
          calls.push_back(std::move(c));
        }
        (void)router.take_effects();
      }
      schedule(now + static_cast<double>(o.report_ms) * 1e-3, report, 0);
    }
  }
  res.sim_wall_s = std::chrono::duration<double>(wall_clock::now() - wall0).count();

  const router_stats st = router.stats();
  res.replay_same = replay(cfg, popts, n_replicas, calls, st, 3, res.replay_wall_s, res.replay_cpu_s);
  res.placements = st.placed;
  res.stale += static_cast<int>(st.stale_outputs);
  res.span_s = last_end - (work.empty() ? 0 : work.front().arrival_s);
  int64_t hits = 0, prompts = 0, max_placed = 0;
  double batch = 0;
  for (const auto& rep : reps) {
    hits += rep->hit_tokens();
    prompts += rep->prompt_tokens();
    batch += rep->mean_batch();
  }
  for (const auto& r : st.replicas) max_placed = std::max(max_placed, r.placed);
  res.hit_rate = prompts ? static_cast<double>(hits) / static_cast<double>(prompts) : 0;
  res.mean_batch = batch / n_replicas;
  res.spread = work.empty() ? 0 : static_cast<double>(max_placed) * n_replicas / static_cast<double>(work.size());
  return res;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_router_bench(const router_bench_options& o) {
  std::vector<int> counts;
  for (const auto& s : split(o.replicas)) {
    char* end = nullptr;
    const long n = std::strtol(s.c_str(), &end, 10);
    if (*end != '\0' || n < 1) {
      std::fprintf(stderr, "error: --replicas '%s': expected comma-separated counts >= 1\n", o.replicas.c_str());
      return 1;
    }
    counts.push_back(static_cast<int>(n));
  }
  const auto policies = split(o.policies);
  for (const auto& p : policies)
    if (auto f = routing_policy_registry().find(p); !f) {
      std::fprintf(stderr, "error: %s\n", f.error().c_str());
      return 1;
    }
  if (o.prefix_min < 1 || o.prefix_max < o.prefix_min || o.suffix_min < 1 || o.suffix_max < o.suffix_min ||
      o.output_min < 1 || o.output_max < o.output_min || o.prefixes < 1 || o.max_seqs < 1 || o.step_tokens < 1 ||
      o.rate <= 0 || o.requests_per_replica < 1) {
    std::fprintf(stderr, "error: lengths, counts and the rate must be positive, and each max >= its min\n");
    return 1;
  }

  std::printf("troupe bench router: the real router_state and routing policies, replicas simulated "
              "(discrete events in simulated time, no model)\n");
  std::printf("CPU (router timings): %s, 1 thread\n", cpu_name().c_str());
  std::printf("replica model: step = %.1f ms + %.1f us x tokens fed; up to %d sequences, %d tokens a step "
              "(chunked prefill, decodes first); prefix cache %d blocks x %d tokens, LRU; load reports every %lld ms\n",
              o.step_base_ms, o.step_token_us, o.max_seqs, o.step_tokens, o.cache_blocks, block_size,
              static_cast<long long>(o.report_ms));
  std::printf("workload: %d requests per replica, Poisson at %.1f/s per replica; prompt = one of %d shared prefixes "
              "(%d-%d tokens, Zipf %.2f) + a unique suffix (%d-%d tokens); output %d-%d tokens; seed %llu\n",
              o.requests_per_replica, o.rate, o.prefixes, o.prefix_min, o.prefix_max, o.zipf, o.suffix_min,
              o.suffix_max, o.output_min, o.output_max, static_cast<unsigned long long>(o.seed));
  std::printf("tok/s, TTFT and e2e are simulated time; place/s, req/s and Mtok/s are the router's own speed, "
              "wall clock on this CPU, one thread\n\n");
  std::printf("%8s %-16s %10s %7s %9s %9s %9s %9s %6s %6s %10s %10s %8s %7s\n", "replicas", "policy", "tok/s", "hit%",
              "TTFT p50", "TTFT p99", "e2e p50", "e2e p99", "batch", "spread", "place/s", "req/s", "Mtok/s",
              "wall s");
  std::fflush(stdout);
  bool ok = true;
  double cpu_sum = 0, wall_sum = 0;
  for (int n : counts) {
    const auto work = make_workload(o, n);
    for (const auto& p : policies) {
      auto r = simulate(o, p, n, work);
      if (!r) {
        std::fprintf(stderr, "error: %s\n", r.error().c_str());
        return 1;
      }
      const sim_result& s = *r;
      const double tps = s.span_s > 0 ? static_cast<double>(s.generated) / s.span_s : 0;
      const double place_rate = s.enqueue_s > 0 ? static_cast<double>(s.placements) / s.enqueue_s : 0;
      const double full_rate = s.replay_wall_s > 0 ? static_cast<double>(s.requests) / s.replay_wall_s : 0;
      const double mtok = s.replay_wall_s > 0 ? 1e-6 * static_cast<double>(s.generated) / s.replay_wall_s : 0;
      std::printf("%8d %-16s %10.0f %7.1f %9.0f %9.0f %9.0f %9.0f %6.1f %6.2f %10.0f %10.0f %8.2f %7.2f\n", n,
                  p.c_str(), tps, 100 * s.hit_rate, pct(s.ttft_ms, 50), pct(s.ttft_ms, 99), pct(s.e2e_ms, 50),
                  pct(s.e2e_ms, 99), s.mean_batch, s.spread, place_rate, full_rate, mtok, s.sim_wall_s);
      if (s.failed || s.stale || !s.replay_same) {
        std::printf("  %d failed, %d stale outputs (expected none)%s\n", s.failed, s.stale,
                    s.replay_same ? "" : "; the replay placed requests elsewhere than the run");
        ok = false;
      }
      cpu_sum += s.replay_cpu_s;
      wall_sum += s.replay_wall_s;
      std::fflush(stdout);
    }
  }
  std::printf("\ncolumns: tok/s = generated tokens / (first arrival .. last finish), simulated; hit%% = prompt tokens "
              "found in the replica's prefix cache; TTFT and e2e in simulated ms; batch = mean sequences per step; "
              "spread = the busiest replica's requests / the mean; place/s = requests placed per wall second of "
              "enqueue during the run (each call timed: cache-cold, interleaved with the simulation); req/s and Mtok/s = "
              "the router alone: the run's calls (enqueue, on_output, on_report, take_effects) replayed on a fresh "
              "router_state, best of 3, as requests and generated tokens per wall second; wall s = the run's "
              "wall time\n");
  std::printf("the replays' thread CPU time was %.0f%% of their wall time (below 100%%: this thread was preempted, "
              "the machine is busy)\n", wall_sum > 0 ? 100 * cpu_sum / wall_sum : 0.0);
  return ok ? 0 : 1;
}

troupe::app::register_bench reg("router", "Router at scale: simulated replicas behind the real router_state and policies",
                                [](CLI::App& sub) {
  auto o = std::make_shared<router_bench_options>();
  sub.add_option("--replicas", o->replicas, "replica counts, comma-separated")->capture_default_str();
  sub.add_option("--policies", o->policies, "routing policies, comma-separated")->capture_default_str();
  sub.add_option("--requests-per-replica", o->requests_per_replica, "requests per replica")->capture_default_str();
  sub.add_option("--rate", o->rate, "Poisson arrivals, requests/s per replica")->capture_default_str();
  sub.add_option("--prefixes", o->prefixes, "distinct shared prefixes")->capture_default_str();
  sub.add_option("--zipf", o->zipf, "popularity exponent of the prefixes (0: uniform)")->capture_default_str();
  sub.add_option("--prefix-min", o->prefix_min, "shortest prefix, tokens")->capture_default_str();
  sub.add_option("--prefix-max", o->prefix_max, "longest prefix, tokens")->capture_default_str();
  sub.add_option("--suffix-min", o->suffix_min, "shortest unique suffix, tokens")->capture_default_str();
  sub.add_option("--suffix-max", o->suffix_max, "longest unique suffix, tokens")->capture_default_str();
  sub.add_option("--output-min", o->output_min, "shortest output, tokens")->capture_default_str();
  sub.add_option("--output-max", o->output_max, "longest output, tokens")->capture_default_str();
  sub.add_option("--step-base-ms", o->step_base_ms, "modelled step: fixed cost, ms")->capture_default_str();
  sub.add_option("--step-token-us", o->step_token_us, "modelled step: cost per token fed, us")->capture_default_str();
  sub.add_option("--max-seqs", o->max_seqs, "sequences a replica runs at once")->capture_default_str();
  sub.add_option("--step-tokens", o->step_tokens, "tokens per step (chunked prefill)")->capture_default_str();
  sub.add_option("--cache-blocks", o->cache_blocks, "prefix-cache blocks per replica (16 tokens)")->capture_default_str();
  sub.add_option("--report-ms", o->report_ms, "load report interval, ms")->capture_default_str();
  sub.add_option("--max-imbalance", o->max_imbalance, "prefix_affinity.max_imbalance (< 0: its default)")
      ->capture_default_str();
  sub.add_option("--balance-ratio", o->balance_ratio, "prefix_affinity.balance_ratio (< 0: its default)")
      ->capture_default_str();
  sub.add_option("--seed", o->seed, "workload seed")->capture_default_str();
  return [o]() { return run_router_bench(*o); };
});

}  // namespace

}  // namespace troupe::bench

// The built-in policies `adaptive`, `window` and `bucketed`, driven through scheduler_state with
// injected time: a simulated executor (executor_state over the fake backend) answers each step
// after a latency the test chooses, so the controllers and windows see only the test's clock.
// Every run also checks that outputs equal the requests' isolated runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "actors/executor/executor_state.hpp"
#include "actors/scheduler/scheduler_state.hpp"
#include "tests/support/fake_backend.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fake_backend;
using troupe::test::fake_options;
using troupe::test::fake_reference;

namespace {

constexpr int64_t ms = 1000;

std::unique_ptr<scheduling_policy> make_policy(const std::string& name, policy_options o = {}) {
  auto p = scheduling_policy_registry().make(name, o);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.ok() ? std::move(p.value()) : nullptr;
}

std::vector<int32_t> prompt_of(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = 32 + static_cast<int32_t>(rng() % 95);
  return p;
}

scheduler_config cfg(int32_t budget, int32_t seqs, int32_t depth = 2) {
  scheduler_config c;
  c.max_batched_tokens = budget;
  c.max_num_seqs = seqs;
  c.max_steps_in_flight = depth;
  return c;
}

// A scheduler and an executor whose steps take `latency(plan)` of simulated time each, one after
// another, with up to max_steps_in_flight plans queued the way the actors keep them.
struct sim {
  fake_options fo;
  scheduler_state sched;
  executor_state exec;
  std::function<int64_t(const step_plan&)> latency = [](const step_plan&) { return 1 * ms; };
  int64_t now = 1'000'000;
  uint64_t next_id = 1;
  std::map<uint64_t, std::vector<int32_t>> prompts;
  std::map<uint64_t, int32_t> max_tokens;
  std::map<uint64_t, int64_t> arrival, first_planned;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, seq_finished> finished;
  std::map<uint64_t, seq_failed> failed;
  std::deque<step_plan> queue;
  std::vector<step_plan> plans;
  std::vector<int64_t> plan_times;

  sim(fake_options o, scheduler_config c, const std::string& pol, policy_options po = {})
      : fo(o), sched(c, kv_geometry{o.n_blocks, o.block_size}, make_policy(pol, po)),
        exec(std::make_unique<fake_backend>(o)) {}

  uint64_t add(size_t prompt_len, int32_t n_out) {
    return add(prompt_of(static_cast<uint32_t>(next_id * 31 + prompt_len), prompt_len), n_out);
  }
  uint64_t add(std::vector<int32_t> prompt, int32_t n_out) {
    const uint64_t id = next_id++;
    admitted_request r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_tokens = n_out;
    r.eog = {256};
    r.arrival_us = now;
    prompts[id] = r.prompt;
    max_tokens[id] = n_out;
    arrival[id] = now;
    sched.enqueue(std::move(r), now);
    return id;
  }
  void collect() {
    auto out = sched.take_output();
    for (auto& t : out.tokens) tokens[t.id].push_back(t.token);
    for (auto& f : out.finished) finished[f.id] = f;
    for (auto& f : out.failed) failed[f.id] = f;
  }
  void fill() {
    while (auto p = sched.plan(now)) {
      for (const auto& e : p->entries) first_planned.emplace(e.seq_id, now);
      plans.push_back(*p);
      plan_times.push_back(now);
      queue.push_back(std::move(*p));
    }
    collect();
  }
  // Plans what it can now, then runs the oldest step; false when nothing ran.
  bool step() {
    fill();
    if (queue.empty()) return false;
    auto p = std::move(queue.front());
    queue.pop_front();
    auto r = exec.run(p);
    now += latency(p);
    sched.apply(r, now);
    collect();
    return true;
  }
  // Runs until idle; when nothing is left to run the clock moves on by `idle_us` per round, so
  // that policies that wait for time to pass see it pass.
  void drain(int64_t idle_us = 1 * ms, int max_rounds = 1'000'000) {
    for (int i = 0; i < max_rounds && !sched.empty(); ++i)
      if (!step()) now += idle_us;
  }
  int32_t limit() const { return sched.stats().max_num_seqs; }
  // Every request's output equals its isolated run; a dropped one's is a prefix of it.
  void expect_exact(const std::set<uint64_t>& dropped = {}) const {
    EXPECT_TRUE(failed.empty());
    EXPECT_TRUE(sched.empty());
    EXPECT_EQ(sched.kv().pool().available(), fo.n_blocks);
    for (const auto& [id, p] : prompts) {
      auto it = tokens.find(id);
      const auto out = it == tokens.end() ? std::vector<int32_t>{} : it->second;
      const auto ref = fake_reference(fo, p, max_tokens.at(id));
      if (dropped.count(id)) {
        ASSERT_LE(out.size(), ref.size()) << id;
        EXPECT_TRUE(std::equal(out.begin(), out.end(), ref.begin())) << id;
        continue;
      }
      EXPECT_TRUE(finished.count(id)) << id;
      EXPECT_EQ(out, ref) << id;
    }
  }
};

// A step costs a fixed part, a part per sequence and a part per token fed, times a noise factor.
struct latency_model {
  int64_t base_us = 20 * ms;
  int64_t per_seq_us = 5 * ms;
  int64_t per_token_us = 0;
  double noise = 0;  // uniform relative noise, +-
  std::mt19937_64 rng{7};
  int64_t operator()(const step_plan& p) {
    const double clean = static_cast<double>(base_us + per_seq_us * static_cast<int64_t>(p.entries.size()) +
                                             per_token_us * p.n_tokens());
    std::uniform_real_distribution<double> u(-noise, noise);
    return static_cast<int64_t>(clean * (1 + u(rng)));
  }
};

fake_options roomy_kv() {
  fake_options fo;
  fo.n_blocks = 4096;
  fo.block_size = 16;
  return fo;
}

// Keeps `backlog` requests waiting (a saturating load): short prompts, mixed output lengths.
void top_up(sim& s, std::mt19937& rng, int backlog) {
  while (s.sched.stats().waiting < backlog) s.add(8, 30 + static_cast<int32_t>(rng() % 31));
}

}  // namespace

// --- adaptive ------------------------------------------------------------------------------------

// target 100 ms; a step costs 20 ms + 5 ms per sequence, so 16 sequences hit the target and
// the dead band (+-20%) spans 12..20 sequences. Configured for 48.
TEST(adaptive_policy, shrinks_when_slow_grows_back_when_fast_and_holds_in_the_band) {
  policy_options po{{{"target_itl_ms", 100.0}, {"dead_band", 0.2}, {"hold_ms", 500.0}, {"min_steps", 8.0}}};
  sim s(roomy_kv(), cfg(512, 48), "adaptive", po);
  latency_model lm;
  lm.noise = 0.2;
  s.latency = [&](const step_plan& p) { return lm(p); };
  std::mt19937 rng(3);
  EXPECT_EQ(s.limit(), 48);

  // 1. Slow steps: the limit comes down into the band.
  int32_t lowest = 48;
  for (int i = 0; i < 1500; ++i) {
    top_up(s, rng, 8);
    s.step();
    lowest = std::min(lowest, s.limit());
  }
  const int32_t settled = s.limit();
  EXPECT_GE(settled, 12);
  EXPECT_LE(settled, 20);
  EXPECT_GE(lowest, 8) << "cut far below the band: it cut again before the previous cut took effect";

  // 2. Steady inside the band for a long noisy run: no change at all, and the steps stay near
  //    the target.
  int changes = 0;
  int32_t last = settled;
  double sum_ms = 0;
  int n = 0;
  for (int i = 0; i < 4000; ++i) {
    top_up(s, rng, 8);
    const int64_t before = s.now;
    s.step();
    sum_ms += static_cast<double>(s.now - before) / ms;
    ++n;
    changes += s.limit() != last;
    last = s.limit();
  }
  EXPECT_EQ(changes, 0) << "oscillated around " << settled;
  EXPECT_GT(sum_ms / n, 80.0);
  EXPECT_LT(sum_ms / n, 120.0);

  // 3. The backend gets faster (2 ms per sequence: 40 sequences hit the target, the band is
  //    30..50): the limit grows back, by one per window, and stops in the band.
  lm.per_seq_us = 2 * ms;
  for (int i = 0; i < 4000; ++i) {
    top_up(s, rng, 8);
    s.step();
  }
  EXPECT_GE(s.limit(), 30);
  EXPECT_LE(s.limit(), 48);

  // 4. Slow again: down it goes.
  lm.per_seq_us = 5 * ms;
  for (int i = 0; i < 3000; ++i) {
    top_up(s, rng, 8);
    s.step();
  }
  EXPECT_GE(s.limit(), 12);
  EXPECT_LE(s.limit(), 20);

  s.drain();
  s.expect_exact();
}

// Steps cost 150 ms whatever the batch (a memory-bound backend, or a busy machine) against a
// 100 ms target: shrinking the batch cannot help, and the limit must not collapse to 1.
TEST(adaptive_policy, does_not_shrink_when_the_batch_is_not_what_makes_steps_slow) {
  sim s(roomy_kv(), cfg(512, 32), "adaptive", {{{"target_itl_ms", 100.0}}});
  latency_model lm;
  lm.base_us = 150 * ms;
  lm.per_seq_us = 0;
  lm.noise = 0.1;
  s.latency = [&](const step_plan& p) { return lm(p); };
  std::mt19937 rng(4);
  for (int i = 0; i < 3000; ++i) {
    top_up(s, rng, 8);
    s.step();
  }
  EXPECT_GE(s.limit(), 16) << "cut although cutting bought nothing";
  s.drain();
  s.expect_exact();
}

TEST(adaptive_policy, never_holds_more_sequences_than_the_limit_once_in_force) {
  policy_options po{{{"target_itl_ms", 50.0}, {"hold_ms", 100.0}, {"min_steps", 4.0}}};
  sim s(roomy_kv(), cfg(512, 32), "adaptive", po);
  latency_model lm;  // 20 ms + 5 ms per sequence: 6 sequences make 50 ms
  s.latency = [&](const step_plan& p) { return lm(p); };
  std::mt19937 rng(5);
  int32_t prev_limit = s.limit();
  int32_t prev_running = 0;
  for (int i = 0; i < 1500; ++i) {
    top_up(s, rng, 4);
    s.step();
    const auto st = s.sched.stats();
    // Admission respects the limit: the batch grows only while below it.
    if (st.running > prev_running) {
      EXPECT_LE(st.running, std::max(prev_limit, st.max_num_seqs)) << i;
    }
    prev_limit = st.max_num_seqs;
    prev_running = st.running;
  }
  EXPECT_LE(s.limit(), 8);
  EXPECT_GE(s.limit(), 4);
  s.drain();
  s.expect_exact();
}

// No latency pressure at all, but KV memory too small for the configured batch: fcfs admits 32
// and then preempts (recomputes) over and over; adaptive lowers the limit on KV pressure and
// preempts far less.
TEST(adaptive_policy, lowers_the_limit_under_kv_pressure) {
  auto run = [](const std::string& pol, int32_t* lowest) {
    fake_options fo;
    fo.n_blocks = 96;
    fo.block_size = 8;  // 768 token slots; a request ends at 8 + 64..96 tokens (9..13 blocks)
    const policy_options po = pol == "adaptive" ? policy_options{{{"target_itl_ms", 1000.0}, {"hold_ms", 100.0}}}
                                                : policy_options{};
    sim s(fo, cfg(256, 32), pol, po);
    s.latency = [](const step_plan&) { return 10 * ms; };
    std::mt19937 rng(11);
    *lowest = s.limit();
    for (int k = 0; k < 200; ++k) {
      while (s.sched.stats().waiting < 8 && s.next_id <= 200) s.add(8, 64 + static_cast<int32_t>(rng() % 33));
      s.step();
      *lowest = std::min(*lowest, s.limit());
    }
    s.drain();
    s.expect_exact();
    return s.sched.stats().preemptions;
  };
  int32_t lowest_fcfs = 0, lowest_adaptive = 0;
  const auto pre_fcfs = run("fcfs", &lowest_fcfs);
  const auto pre_adaptive = run("adaptive", &lowest_adaptive);
  EXPECT_EQ(lowest_fcfs, 32);
  EXPECT_LT(lowest_adaptive, 32);
  EXPECT_GT(pre_fcfs, 0);
  EXPECT_LT(pre_adaptive, pre_fcfs) << "fcfs " << pre_fcfs << ", adaptive " << pre_adaptive;
}

// The controller alone, fed synthetic steps.
TEST(adaptive_policy, controller_holds_in_the_dead_band_and_waits_for_a_cut_to_take_effect) {
  // Windows of 16 steps, no minimum time.
  auto p = make_policy("adaptive", {{{"target_itl_ms", 100.0}, {"dead_band", 0.2}, {"hold_ms", 0.0},
                                     {"min_steps", 16.0}}});
  ASSERT_TRUE(p);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-0.3, 0.3);  // single steps leave the band often
  step_feedback f;
  f.max_num_seqs = 64;
  f.n_running = 64;
  f.n_waiting = 10;
  f.kv_free = 0.5;
  auto feed = [&](double mean_ms, int n) {
    for (int i = 0; i < n; ++i) {
      f.latency_us = static_cast<int64_t>(mean_ms * (1 + u(rng)) * ms);
      f.now_us += f.latency_us;
      // The batch follows the limit: up while requests wait, down as members finish.
      f.n_running = f.n_waiting > 0 ? p->max_num_seqs(64) : std::min(f.n_running, p->max_num_seqs(64));
      p->on_step(f);
    }
  };
  feed(100, 20000);
  EXPECT_EQ(p->max_num_seqs(64), 64) << "moved inside the dead band";
  feed(150, 16);
  EXPECT_EQ(p->max_num_seqs(64), 48);  // 0.75 * 64
  // Still 64 holding KV (the cut preempts nobody): slow windows measure the old batch; hold.
  f.n_running = 64;
  for (int i = 0; i < 48; ++i) {
    f.latency_us = 150 * ms;
    f.now_us += f.latency_us;
    p->on_step(f);
  }
  EXPECT_EQ(p->max_num_seqs(64), 48);
  // Once the batch is down to 48, a slow window cuts again.
  feed(150, 16);
  EXPECT_EQ(p->max_num_seqs(64), 36);
  // Fast but not binding (nobody waits): no growth.
  f.n_waiting = 0;
  feed(50, 400);
  EXPECT_EQ(p->max_num_seqs(64), 36);
  // Fast and binding: +1 per window.
  f.n_waiting = 5;
  feed(50, 160);
  EXPECT_EQ(p->max_num_seqs(64), 46);
  // KV pressure cuts even when fast; growth resumes only above kv_high_free.
  f.kv_free = 0.01;
  feed(50, 16);
  EXPECT_EQ(p->max_num_seqs(64), 34);  // 0.75 * 46
  f.kv_free = 0.1;  // between kv_low_free and kv_high_free: hold
  feed(50, 160);
  EXPECT_EQ(p->max_num_seqs(64), 34);
  f.kv_free = 0.5;
  feed(50, 32);
  EXPECT_EQ(p->max_num_seqs(64), 36);
  // Never below min_num_seqs nor above the configured limit.
  feed(10000, 400);
  EXPECT_EQ(p->max_num_seqs(64), 1);
  EXPECT_EQ(p->max_num_seqs(0), 0);  // the scheduler clamps to >= 1 itself
}

// --- window --------------------------------------------------------------------------------------

TEST(window_policy, idle_engine_waits_up_to_window_ms) {
  sim s(fake_options{}, cfg(256, 8), "window", {{{"window_ms", 20.0}, {"min_batch", 4.0}}});
  const int64_t t0 = s.now;
  s.add(5, 3);
  EXPECT_FALSE(s.sched.plan(t0));
  EXPECT_FALSE(s.sched.plan(t0 + 10 * ms));
  s.now = t0 + 12 * ms;
  s.add(5, 3);
  EXPECT_FALSE(s.sched.plan(t0 + 20 * ms - 1)) << "started before the window closed";
  auto p = s.sched.plan(t0 + 20 * ms);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->entries.size(), 2u) << "the window's requests start together";
  s.queue.push_back(*p);
  s.now = t0 + 20 * ms;
  s.drain();
  s.expect_exact();
}

TEST(window_policy, starts_at_once_when_min_batch_wait) {
  sim s(fake_options{}, cfg(256, 8), "window", {{{"window_ms", 1000.0}, {"min_batch", 3.0}}});
  s.add(5, 3);
  s.add(6, 3);
  EXPECT_FALSE(s.sched.plan(s.now));
  s.add(7, 3);
  auto p = s.sched.plan(s.now);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->entries.size(), 3u);
  s.queue.push_back(*p);
  s.drain();
  s.expect_exact();
}

TEST(window_policy, min_batch_zero_means_a_full_batch) {
  sim s(fake_options{}, cfg(256, 4), "window", {{{"window_ms", 1000.0}}});
  for (int i = 0; i < 3; ++i) s.add(5, 3);
  EXPECT_FALSE(s.sched.plan(s.now));
  s.add(5, 3);
  auto p = s.sched.plan(s.now);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->entries.size(), 4u);
}

TEST(window_policy, never_delays_a_running_batch) {
  sim s(fake_options{}, cfg(256, 8), "window", {{{"window_ms", 50.0}, {"min_batch", 8.0}}});
  s.add(5, 40);
  s.drain(1 * ms, 60);  // the window passes, the first request starts
  ASSERT_TRUE(s.first_planned.count(1));
  EXPECT_GE(s.first_planned[1] - s.arrival[1], 50 * ms);
  for (int k = 0; k < 5; ++k) {
    s.step();
    const uint64_t id = s.add(5, 3);
    s.step();  // the next plan takes it in, at the time it arrived
    ASSERT_TRUE(s.first_planned.count(id)) << "request " << id << " waited although a batch was running";
    EXPECT_EQ(s.first_planned[id], s.arrival[id]);
  }
  s.drain();
  s.expect_exact();
}

TEST(window_policy, zero_window_is_fcfs) {
  sim s(fake_options{}, cfg(256, 8), "window", {{{"window_ms", 0.0}}});
  s.add(5, 3);
  EXPECT_TRUE(s.sched.plan(s.now));
}

// --- bucketed ------------------------------------------------------------------------------------

namespace {

// The largest longest/shortest prompt ratio over the members of any one step (lengths below
// `floor` counted as `floor`).
double worst_spread(const sim& s, int32_t floor) {
  double worst = 1;
  for (const auto& p : s.plans) {
    double lo = 1e18, hi = 0;
    for (const auto& e : p.entries) {
      const double len = std::max<double>(floor, static_cast<double>(s.prompts.at(e.seq_id).size()));
      lo = std::min(lo, len);
      hi = std::max(hi, len);
    }
    if (hi > 0) worst = std::max(worst, hi / lo);
  }
  return worst;
}

void mixed_lengths(sim& s, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int k = 0; k < 300; ++k) {
    if (k % 3 == 0 && s.next_id <= 60) s.add(4 + rng() % 96, 4 + static_cast<int32_t>(rng() % 12));
    s.step();
  }
  s.drain();
}

}  // namespace

TEST(bucketed_policy, keeps_the_spread_of_prompt_lengths_bounded) {
  sim b(roomy_kv(), cfg(512, 8), "bucketed",
        {{{"max_length_ratio", 2.0}, {"max_wait_ms", 1e6}, {"min_length", 16.0}}});
  mixed_lengths(b, 9);
  b.expect_exact();
  EXPECT_EQ(b.finished.size(), 60u);
  EXPECT_LE(worst_spread(b, 16), 2.0);

  sim f(roomy_kv(), cfg(512, 8), "fcfs");
  mixed_lengths(f, 9);
  EXPECT_GT(worst_spread(f, 16), 2.0) << "the workload does not test anything";
}

TEST(bucketed_policy, an_outlier_runs_after_max_wait_ms) {
  auto run = [](const std::string& pol) {
    sim s(roomy_kv(), cfg(512, 4), pol, pol == "bucketed" ? policy_options{{{"max_wait_ms", 50.0}}} : policy_options{});
    // The batch never empties (were it empty, the oldest request would start the next one).
    for (int i = 0; i < 4; ++i) s.add(8, 10 + i);
    s.step();
    const uint64_t outlier = s.add(200, 4);  // 200 tokens among 8-token prompts (16 with min_length)
    std::mt19937 rng(2);
    for (int k = 0; k < 400 && !s.finished.count(outlier); ++k) {
      if (s.sched.stats().waiting < 6) s.add(8, 8 + static_cast<int32_t>(rng() % 8));  // a stream of short ones
      s.step();
    }
    EXPECT_TRUE(s.finished.count(outlier)) << pol;
    s.drain();
    s.expect_exact();
    return s.first_planned.at(outlier) - s.arrival.at(outlier);
  };
  const int64_t waited_fcfs = run("fcfs");
  const int64_t waited = run("bucketed");
  EXPECT_LT(waited_fcfs, 20 * ms);
  EXPECT_GE(waited, 50 * ms) << "joined a batch of short prompts before max_wait_ms";
  EXPECT_LE(waited, 50 * ms + 20 * ms) << "waited long after max_wait_ms";
}

// --- registry ------------------------------------------------------------------------------------

TEST(policy_registry, new_builtins_are_registered_and_check_their_options) {
  auto& g = scheduling_policy_registry();
  for (auto n : {"adaptive", "window", "bucketed"}) {
    EXPECT_TRUE(g.contains(n)) << n;
    EXPECT_TRUE(g.make(n).ok()) << n;
  }
  auto bad = g.make("window", {{{"batch_wait_ms", 5.0}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("window_ms"), std::string::npos) << bad.error();
  EXPECT_FALSE(g.make("adaptive", {{{"target_itl_ms", 0.0}}}).ok());
  EXPECT_FALSE(g.make("adaptive", {{{"decrease", 1.0}}}).ok());
  EXPECT_FALSE(g.make("adaptive", {{{"min_steps", 2.5}}}).ok());
  EXPECT_FALSE(g.make("adaptive", {{{"kv_low_free", 0.3}, {"kv_high_free", 0.2}}}).ok());
  EXPECT_FALSE(g.make("window", {{{"window_ms", -1.0}}}).ok());
  // static's wait is bounded as the others' (1e13 ms never started a lone request; 1e18 wrapped).
  EXPECT_TRUE(g.make("static", {{{"batch_wait_ms", 3600000.0}}}).ok());
  for (double w : {3600001.0, 1e13, 1e18}) EXPECT_FALSE(g.make("static", {{{"batch_wait_ms", w}}}).ok()) << w;
  EXPECT_FALSE(g.make("window", {{{"min_batch", 1.5}}}).ok());
  EXPECT_FALSE(g.make("bucketed", {{{"max_length_ratio", 0.5}}}).ok());
  EXPECT_FALSE(g.make("bucketed", {{{"min_length", 0.0}}}).ok());
  EXPECT_FALSE(g.make("bucketed", {{{"max_wait_ms", -1.0}}}).ok());
}

// --- all three under a random load ---------------------------------------------------------------

// Small KV memory (preemptions), end-of-generation tokens, drops, shared prefixes, pipelining
// depths 1..3, noisy step times, idle gaps: outputs stay exact and nothing leaks.
TEST(scheduling_policies, exact_under_random_load_with_eog_drops_and_preemption) {
  const std::vector<std::pair<std::string, policy_options>> pols = {
      {"adaptive", {{{"target_itl_ms", 3.0}, {"hold_ms", 5.0}, {"min_steps", 2.0}, {"dead_band", 0.1}}}},
      {"window", {{{"window_ms", 3.0}, {"min_batch", 3.0}}}},
      {"bucketed", {{{"max_length_ratio", 1.5}, {"max_wait_ms", 20.0}, {"min_length", 4.0}}}},
  };
  for (const auto& [pol, po] : pols)
    for (int depth = 1; depth <= 3; ++depth) {
      SCOPED_TRACE(pol + " depth " + std::to_string(depth));
      fake_options fo;
      fo.n_blocks = 40;
      fo.block_size = 4;
      fo.eog_every = 9;
      sim s(fo, cfg(20, 6, depth), pol, po);
      latency_model lm;
      lm.base_us = 500;
      lm.per_seq_us = 500;
      lm.per_token_us = 20;
      lm.noise = 0.5;
      s.latency = [&](const step_plan& p) { return lm(p); };
      std::mt19937 rng(static_cast<uint32_t>(depth));
      std::set<uint64_t> dropped;
      std::set<int32_t> limits;
      for (int round = 0; round < 600; ++round) {
        if (rng() % 3 == 0 && s.next_id <= 80) {
          auto p = prompt_of(static_cast<uint32_t>(s.next_id * 7), 3 + rng() % 20);
          if (rng() % 2) p.insert(p.begin(), {50, 51, 52, 53, 54, 55, 56, 57});  // shared prefix
          s.add(std::move(p), 1 + static_cast<int32_t>(rng() % 40));
        }
        if (rng() % 17 == 0 && s.next_id > 1) {
          const uint64_t victim = 1 + rng() % (s.next_id - 1);
          if (!s.finished.count(victim) && !dropped.count(victim)) {
            s.sched.drop(victim, s.now);
            dropped.insert(victim);
          }
        }
        if (!s.step()) s.now += 1 * ms;
        limits.insert(s.limit());
      }
      s.drain();
      s.expect_exact(dropped);
      if (pol == "adaptive") {
        EXPECT_GT(limits.size(), 1u) << "the limit never moved: the test tests nothing";
      }
    }
}

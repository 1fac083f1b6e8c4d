// scheduler_state driven directly, with executor_state over the fake backend: continuous
// batching, token budget, chunked prefill, prefix reuse, preemption by recompute, pipelined
// planning, deadlines, pause, executor reset, and each built-in policy.
#include "actors/scheduler/scheduler_state.hpp"

#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "actors/executor/executor_state.hpp"
#include "tests/support/fake_backend.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fake_backend;
using troupe::test::fake_options;
using troupe::test::fake_reference;

namespace {

std::unique_ptr<scheduling_policy> policy(const std::string& name, policy_options o = {}) {
  auto p = scheduling_policy_registry().make(name, o);
  EXPECT_TRUE(p.ok()) << p.error();
  return std::move(p.value());
}

admitted_request req(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int64_t arrival = 0,
                     int32_t priority = 0) {
  admitted_request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.eog = {256};
  r.arrival_us = arrival;
  r.priority = priority;
  return r;
}

std::vector<int32_t> prompt_of(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = 32 + static_cast<int32_t>(rng() % 95);
  return p;
}

// Runs scheduler and executor in lock step, keeping up to max_steps_in_flight plans queued the
// way the actors do.
struct harness {
  fake_options fo;
  scheduler_state sched;
  executor_state exec;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, seq_finished> finished;
  std::map<uint64_t, seq_failed> failed;
  std::vector<step_plan> plans;  // every plan, for inspection
  std::deque<step_plan> queue;
  int64_t now = 1000;
  // The time a step takes, by what it feeds (default: 1 ms each): the scheduler measures it.
  std::function<int64_t(const step_plan&)> step_us;

  harness(fake_options o, scheduler_config c, const std::string& pol = "fcfs", policy_options po = {})
      : fo(o),
        sched(c, kv_geometry{o.n_blocks, o.block_size}, policy(pol, po)),
        exec(std::make_unique<fake_backend>(o)) {}

  void collect() {
    auto out = sched.take_output();
    for (auto& t : out.tokens) tokens[t.id].push_back(t.token);
    for (auto& f : out.finished) finished[f.id] = f;
    for (auto& f : out.failed) failed[f.id] = f;
  }
  void fill() {
    while (auto p = sched.plan(now)) {
      plans.push_back(*p);
      queue.push_back(std::move(*p));
    }
    collect();
  }
  // One executor step; false when there was nothing to run.
  bool step() {
    fill();
    if (queue.empty()) return false;
    auto p = std::move(queue.front());
    queue.pop_front();
    auto r = exec.run(p);
    now += step_us ? step_us(p) : 1000;
    sched.apply(r, now);
    collect();
    return true;
  }
  void run(int max_steps = 100000) {
    for (int i = 0; i < max_steps && step(); ++i) {
    }
  }
};

scheduler_config cfg(int32_t budget = 64, int32_t seqs = 8, bool prefix = true, int32_t depth = 2) {
  scheduler_config c;
  c.max_batched_tokens = budget;
  c.max_num_seqs = seqs;
  c.prefix_caching = prefix;
  c.max_steps_in_flight = depth;
  return c;
}

}  // namespace

TEST(scheduler_state, single_request_matches_reference) {
  fake_options fo;
  harness h(fo, cfg());
  auto p = prompt_of(1, 10);
  h.sched.enqueue(req(1, p, 20), h.now);
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 20));
  ASSERT_TRUE(h.finished.count(1));
  EXPECT_EQ(h.finished[1].reason, finish::length);
  EXPECT_EQ(h.finished[1].usage.completion_tokens, 20);
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, eog_finishes_with_stop_and_is_not_emitted) {
  fake_options fo;
  fo.eog_every = 5;
  harness h(fo, cfg());
  int stops = 0;
  for (uint64_t i = 1; i <= 20; ++i) h.sched.enqueue(req(i, prompt_of(static_cast<uint32_t>(i), 6), 40), h.now);
  h.run();
  for (uint64_t i = 1; i <= 20; ++i) {
    auto ref = fake_reference(fo, prompt_of(static_cast<uint32_t>(i), 6), 40);
    EXPECT_EQ(h.tokens[i], ref) << i;
    ASSERT_TRUE(h.finished.count(i));
    stops += h.finished[i].reason == finish::stop;
    EXPECT_EQ(h.finished[i].reason, ref.size() < 40 ? finish::stop : finish::length);
  }
  EXPECT_GT(stops, 0);
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, continuous_batching_respects_budget_and_batch_size) {
  fake_options fo;
  fo.n_blocks = 256;
  harness h(fo, cfg(/*budget*/ 24, /*seqs*/ 5));
  for (uint64_t i = 1; i <= 12; ++i)
    h.sched.enqueue(req(i, prompt_of(static_cast<uint32_t>(i), 5 + i * 3), 10 + static_cast<int32_t>(i % 4) * 7, static_cast<int64_t>(i)), h.now);
  h.run();
  size_t max_seqs = 0;
  bool mixed = false;
  for (const auto& p : h.plans) {
    EXPECT_LE(p.n_tokens(), 24);
    max_seqs = std::max(max_seqs, p.entries.size());
    bool has_decode = false, has_prefill = false;
    for (const auto& e : p.entries) (e.n_fed() == 1 && e.sample ? has_decode : has_prefill) = true;
    mixed = mixed || (has_decode && has_prefill);
  }
  EXPECT_LE(max_seqs, 5u);
  EXPECT_GE(max_seqs, 4u);
  EXPECT_TRUE(mixed) << "chunked prefill never shared a step with decodes";
  for (uint64_t i = 1; i <= 12; ++i)
    EXPECT_EQ(h.tokens[i], fake_reference(fo, prompt_of(static_cast<uint32_t>(i), 5 + i * 3), 10 + static_cast<int32_t>(i % 4) * 7)) << i;
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, chunked_prefill_splits_long_prompt) {
  fake_options fo;
  fo.n_blocks = 128;
  harness h(fo, cfg(/*budget*/ 16));
  auto p = prompt_of(7, 100);
  h.sched.enqueue(req(1, p, 5), h.now);
  h.run();
  ASSERT_GE(h.plans.size(), 7u);
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_EQ(h.plans[i].entries.size(), 1u);
    EXPECT_EQ(h.plans[i].entries[0].n_fed(), 16);
    EXPECT_EQ(h.plans[i].entries[0].n_past, static_cast<int32_t>(16 * i));
    EXPECT_FALSE(h.plans[i].entries[0].sample);
  }
  EXPECT_EQ(h.plans[6].entries[0].n_fed(), 4);
  EXPECT_TRUE(h.plans[6].entries[0].sample);
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 5));
}

TEST(scheduler_state, pipelined_plan_refers_to_the_sample_in_flight) {
  fake_options fo;
  harness h(fo, cfg(64, 8, true, /*depth*/ 2));
  auto p = prompt_of(3, 8);
  h.sched.enqueue(req(1, p, 6), h.now);
  h.fill();
  ASSERT_EQ(h.queue.size(), 2u);  // step 2 planned before step 1 ran
  EXPECT_TRUE(h.queue[0].entries[0].sample);
  EXPECT_TRUE(h.queue[1].entries[0].feed_last_sample);
  EXPECT_TRUE(h.queue[1].entries[0].tokens.empty());
  EXPECT_EQ(h.queue[1].entries[0].n_past, 8);
  EXPECT_FALSE(h.sched.plan(h.now).has_value());  // depth reached
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 6));
}

TEST(scheduler_state, depth_one_alternates) {
  fake_options fo;
  harness h(fo, cfg(64, 8, true, /*depth*/ 1));
  auto p = prompt_of(3, 8);
  h.sched.enqueue(req(1, p, 6), h.now);
  h.fill();
  EXPECT_EQ(h.queue.size(), 1u);
  h.run();
  for (const auto& pl : h.plans)
    for (const auto& e : pl.entries) EXPECT_FALSE(e.feed_last_sample);
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 6));
}

TEST(scheduler_state, prefix_blocks_are_reused_across_requests) {
  fake_options fo;
  fo.block_size = 16;
  fo.n_blocks = 64;
  harness h(fo, cfg(512));
  auto system = prompt_of(11, 64);
  auto a = system, b = system;
  for (int i = 0; i < 6; ++i) a.push_back(40 + i), b.push_back(60 + i);
  h.sched.enqueue(req(1, a, 8), h.now);
  h.run();
  h.sched.enqueue(req(2, b, 8), h.now);
  h.run();
  ASSERT_TRUE(h.finished.count(2));
  EXPECT_EQ(h.finished[1].usage.cached_prompt_tokens, 0);
  EXPECT_EQ(h.finished[2].usage.cached_prompt_tokens, 64);
  EXPECT_EQ(h.tokens[1], fake_reference(fo, a, 8));
  EXPECT_EQ(h.tokens[2], fake_reference(fo, b, 8));
  // The second request's first step fed only what was not cached.
  const auto& first_b = h.plans[h.plans.size() - 8];
  (void)first_b;
  auto st = h.sched.stats();
  EXPECT_EQ(st.prefix_hit_tokens, 64);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
  EXPECT_GT(st.kv_blocks_cached, 0);
}

TEST(scheduler_state, without_prefix_caching_nothing_is_shared) {
  fake_options fo;
  fo.block_size = 16;
  harness h(fo, cfg(512, 8, /*prefix*/ false));
  auto system = prompt_of(11, 64);
  auto a = system;
  a.push_back(40);
  h.sched.enqueue(req(1, a, 4), h.now);
  h.run();
  h.sched.enqueue(req(2, a, 4), h.now);
  h.run();
  EXPECT_EQ(h.finished[2].usage.cached_prompt_tokens, 0);
  EXPECT_EQ(h.tokens[1], h.tokens[2]);
}

TEST(scheduler_state, preemption_by_recompute_keeps_outputs_exact) {
  fake_options fo;
  fo.n_blocks = 24;  // 96 token slots for 8 requests of up to 10 + 30 tokens
  fo.block_size = 4;
  harness h(fo, cfg(32, 8));
  for (uint64_t i = 1; i <= 8; ++i)
    h.sched.enqueue(req(i, prompt_of(static_cast<uint32_t>(100 + i), 10), 30, static_cast<int64_t>(i)), h.now);
  h.run();
  int32_t preempted = 0;
  for (uint64_t i = 1; i <= 8; ++i) {
    EXPECT_EQ(h.tokens[i], fake_reference(fo, prompt_of(static_cast<uint32_t>(100 + i), 10), 30)) << i;
    ASSERT_TRUE(h.finished.count(i));
    preempted += h.finished[i].preemptions;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(h.sched.stats().preemptions, preempted);
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
  EXPECT_TRUE(h.failed.empty());
}

TEST(scheduler_state, preemption_under_random_load_with_eog_and_drops) {
  for (const char* pol : {"fcfs", "priority", "sjf", "static"})
  for (int depth = 1; depth <= 3; ++depth) {
    SCOPED_TRACE(std::string(pol) + " depth " + std::to_string(depth));
    fake_options fo;
    fo.n_blocks = 40;
    fo.block_size = 4;
    fo.eog_every = 9;
    harness h(fo, cfg(20, 6, true, depth), pol);
    std::mt19937 rng(static_cast<uint32_t>(depth));
    std::map<uint64_t, std::pair<std::vector<int32_t>, int32_t>> reqs;
    std::set<uint64_t> dropped;
    uint64_t next = 1;
    for (int round = 0; round < 400; ++round) {
      if (rng() % 3 == 0 && next <= 60) {
        auto p = prompt_of(static_cast<uint32_t>(next * 7), 3 + rng() % 20);
        if (rng() % 2) p.insert(p.begin(), {50, 51, 52, 53, 54, 55, 56, 57});  // shared prefix
        const int32_t mt = 1 + static_cast<int32_t>(rng() % 40);
        reqs[next] = {p, mt};
        h.sched.enqueue(req(next, p, mt, h.now, static_cast<int32_t>(rng() % 3)), h.now);
        ++next;
      }
      if (rng() % 17 == 0 && next > 1) {
        const uint64_t victim = 1 + rng() % (next - 1);
        if (!h.finished.count(victim) && !dropped.count(victim)) {
          h.sched.drop(victim, h.now);
          dropped.insert(victim);
        }
      }
      h.step();
    }
    h.run();
    for (auto& [id, pm] : reqs) {
      auto ref = fake_reference(fo, pm.first, pm.second);
      if (dropped.count(id)) {
        // A prefix of the reference, whatever had come out before the drop.
        ASSERT_LE(h.tokens[id].size(), ref.size());
        EXPECT_TRUE(std::equal(h.tokens[id].begin(), h.tokens[id].end(), ref.begin())) << id;
      } else {
        EXPECT_EQ(h.tokens[id], ref) << "depth " << depth << " request " << id << " max_tokens " << pm.second
                                     << " prompt " << ::testing::PrintToString(pm.first);
        EXPECT_TRUE(h.finished.count(id)) << id;
      }
    }
    EXPECT_TRUE(h.failed.empty());
    EXPECT_TRUE(h.sched.empty());
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks) << depth;
  }
}

TEST(scheduler_state, request_larger_than_kv_memory_fails_at_once) {
  fake_options fo;
  fo.n_blocks = 4;
  fo.block_size = 4;
  harness h(fo, cfg());
  h.sched.enqueue(req(1, prompt_of(1, 10), 10), h.now);
  h.collect();
  ASSERT_TRUE(h.failed.count(1));
  EXPECT_EQ(h.failed[1].code, errc::kv_capacity);
}

TEST(scheduler_state, drop_frees_blocks_and_tombstones_early_drops) {
  fake_options fo;
  harness h(fo, cfg());
  h.sched.enqueue(req(1, prompt_of(1, 10), 50), h.now);
  h.step();
  h.step();
  EXPECT_LT(h.sched.kv().pool().available(), fo.n_blocks);
  h.sched.drop(1, h.now);
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
  h.run();  // the step still in flight is ignored
  EXPECT_FALSE(h.finished.count(1));
  // Dropped before it arrived: never runs.
  h.sched.drop(2, h.now);
  h.sched.enqueue(req(2, prompt_of(2, 10), 5), h.now);
  h.run();
  EXPECT_TRUE(h.tokens[2].empty());
  EXPECT_TRUE(h.sched.empty());
}

TEST(scheduler_state, paused_sequence_is_not_scheduled_until_resumed) {
  fake_options fo;
  harness h(fo, cfg(64, 8, true, 1));
  auto p = prompt_of(5, 6);
  h.sched.enqueue(req(1, p, 10), h.now);
  h.step();
  h.step();
  const auto n = h.tokens[1].size();
  h.sched.pause(1);
  EXPECT_FALSE(h.step());
  EXPECT_EQ(h.tokens[1].size(), n);
  h.sched.resume(1);
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 10));
}

// A paused sequence holds KV memory and makes no progress: a waiting sequence (preempted for
// memory while its consumer reads on) takes its blocks, rather than wait behind it until the
// paused stream is cut off as a slow consumer. The paused one recomputes once resumed.
TEST(scheduler_state, a_waiting_sequence_takes_kv_blocks_from_a_paused_one) {
  fake_options fo;
  fo.n_blocks = 8;  // 32 token slots for two requests of 6 + 20 tokens
  fo.block_size = 4;
  harness h(fo, cfg(64, 8));
  const auto a = prompt_of(1, 6), b = prompt_of(2, 6);
  h.sched.enqueue(req(1, a, 20, 1), h.now);
  h.sched.enqueue(req(2, b, 20, 2), h.now);
  // Both decode until memory runs out: the one served last (2) is preempted.
  while (h.sched.stats().preemptions == 0 && h.step()) {
  }
  ASSERT_EQ(h.sched.stats().preemptions, 1);
  ASSERT_FALSE(h.finished.count(1));
  h.sched.pause(1);  // 1's consumer stops reading; 2's reads on
  h.run();
  ASSERT_TRUE(h.finished.count(2)) << "the waiting sequence starved behind the paused one";
  EXPECT_EQ(h.tokens[2], fake_reference(fo, b, 20));
  EXPECT_FALSE(h.finished.count(1));
  h.sched.resume(1);
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, a, 20));
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, deadlines_fail_queued_and_finish_running) {
  fake_options fo;
  harness h(fo, cfg(64, /*seqs*/ 1));
  auto a = req(1, prompt_of(1, 5), 100);
  a.deadline_us = h.now + 5000;
  auto b = req(2, prompt_of(2, 5), 100);
  b.deadline_us = h.now + 5000;
  h.sched.enqueue(a, h.now);
  h.sched.enqueue(b, h.now);
  h.run();
  ASSERT_TRUE(h.finished.count(1));
  EXPECT_EQ(h.finished[1].reason, finish::deadline);
  EXPECT_GT(h.tokens[1].size(), 0u);
  ASSERT_TRUE(h.failed.count(2));
  EXPECT_EQ(h.failed[2].code, errc::deadline);
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, executor_reset_fails_started_and_keeps_queued) {
  fake_options fo;
  harness h(fo, cfg(64, /*seqs*/ 1));
  h.sched.enqueue(req(1, prompt_of(1, 5), 10), h.now);
  h.sched.enqueue(req(2, prompt_of(2, 5), 10), h.now);
  h.step();
  h.queue.clear();
  h.sched.reset_executor("boom");
  h.collect();
  ASSERT_TRUE(h.failed.count(1));
  EXPECT_EQ(h.failed[1].code, errc::executor_fault);
  EXPECT_FALSE(h.failed.count(2));
  h.exec = executor_state(std::make_unique<fake_backend>(fo));
  h.run();
  EXPECT_EQ(h.tokens[2], fake_reference(fo, prompt_of(2, 5), 10));
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, step_error_fails_only_that_steps_requests) {
  fake_options fo;
  harness h(fo, cfg(64, 8, true, 1));
  h.sched.enqueue(req(1, prompt_of(1, 5), 10), h.now);
  auto p = h.sched.plan(h.now);
  ASSERT_TRUE(p);
  step_result r;
  r.step = p->step;
  r.error = "bad block table";
  h.sched.apply(r, h.now);
  h.collect();
  ASSERT_TRUE(h.failed.count(1));
  EXPECT_NE(h.failed[1].message.find("bad block table"), std::string::npos);
  h.sched.enqueue(req(2, prompt_of(2, 5), 4), h.now);
  h.run();
  EXPECT_EQ(h.tokens[2].size(), 4u);
}

// Fault isolation: a fault tied to one sequence fails that sequence only; the others, caught in
// the same failed steps, are recomputed from their tokens and produce what they would have alone.
TEST(scheduler_state, a_step_error_fails_only_the_faulty_sequence) {
  fake_options fo;
  fo.fault_seq = 3;
  fo.fault_from_pos = 12;  // after a few tokens of its own: in the middle of the batch's life
  fo.fault_throws = false;
  harness h(fo, cfg(64, 8));
  for (uint64_t i = 1; i <= 6; ++i) h.sched.enqueue(req(i, prompt_of(static_cast<uint32_t>(i), 6), 20), h.now);
  h.run();
  ASSERT_TRUE(h.failed.count(3));
  EXPECT_EQ(h.failed[3].code, errc::executor_fault);
  EXPECT_NE(h.failed[3].message.find("injected fault for sequence 3"), std::string::npos) << h.failed[3].message;
  // What it streamed before failing is its own text, without a gap or a repeat.
  const auto ref3 = fake_reference(fo, prompt_of(3, 6), 20);
  ASSERT_LE(h.tokens[3].size(), ref3.size());
  EXPECT_TRUE(std::equal(h.tokens[3].begin(), h.tokens[3].end(), ref3.begin()));
  for (uint64_t i = 1; i <= 6; ++i) {
    if (i == 3) continue;
    EXPECT_FALSE(h.failed.count(i)) << i << ": " << h.failed[i].message;
    EXPECT_EQ(h.tokens[i], fake_reference(fo, prompt_of(static_cast<uint32_t>(i), 6), 20)) << i;
    ASSERT_TRUE(h.finished.count(i)) << i;
    EXPECT_EQ(h.finished[i].usage.completion_tokens, 20);
  }
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, an_executor_that_throws_is_replaced_and_only_the_faulty_sequence_fails) {
  fake_options fo;
  fo.fault_seq = 2;
  fo.fault_from_pos = 9;
  fo.fault_throws = true;
  harness h(fo, cfg(64, 8));
  for (uint64_t i = 1; i <= 5; ++i) h.sched.enqueue(req(i, prompt_of(static_cast<uint32_t>(10 + i), 5), 16), h.now);
  int resets = 0;
  for (int guard = 0; guard < 10000; ++guard) {
    try {
      if (!h.step()) break;
    } catch (const std::exception& e) {
      // What the executor actor does: it dies, and a new one (a fresh backend) takes its place.
      ++resets;
      h.queue.clear();
      h.sched.reset_executor(std::string("executor fault: ") + e.what());
      h.exec = executor_state(std::make_unique<fake_backend>(fo));
      h.collect();
    }
  }
  EXPECT_GE(resets, 2);  // the batch that failed, then the suspect alone
  EXPECT_LE(resets, 3);  // bounded: suspects run one at a time, the culprit fails at once alone
  ASSERT_TRUE(h.failed.count(2));
  EXPECT_NE(h.failed[2].message.find("injected fault for sequence 2"), std::string::npos) << h.failed[2].message;
  for (uint64_t i = 1; i <= 5; ++i) {
    if (i == 2) continue;
    EXPECT_FALSE(h.failed.count(i)) << i;
    EXPECT_EQ(h.tokens[i], fake_reference(fo, prompt_of(static_cast<uint32_t>(10 + i), 5), 16)) << i;
  }
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_state, a_sequence_caught_in_too_many_failed_steps_fails) {
  // Every step fails whatever it holds: the suspects never fail alone here (the test fails their
  // batches by hand), so the bound on failed steps is what ends them.
  fake_options fo;
  harness h(fo, cfg(64, 8, true, 1));
  h.sched.enqueue(req(1, prompt_of(1, 5), 10), h.now);
  h.sched.enqueue(req(2, prompt_of(2, 5), 10), h.now);
  auto p = h.sched.plan(h.now);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->entries.size(), 2u);
  step_result r;
  r.step = p->step;
  r.error = "flaky";
  h.sched.apply(r, h.now);
  h.collect();
  EXPECT_TRUE(h.failed.empty());
  // Now suspects: each runs alone.
  auto solo = h.sched.plan(h.now);
  ASSERT_TRUE(solo);
  EXPECT_EQ(solo->entries.size(), 1u);
  EXPECT_FALSE(h.sched.plan(h.now)) << "nothing runs beside a suspect";
  r.step = solo->step;
  r.error = "flaky alone";
  h.sched.apply(r, h.now);
  h.collect();
  ASSERT_EQ(h.failed.size(), 1u);
  EXPECT_EQ(h.failed.begin()->second.message, "model step failed: flaky alone");
  const uint64_t other = h.failed.count(1) ? 2 : 1;
  h.run();
  EXPECT_FALSE(h.failed.count(other));
  EXPECT_EQ(h.tokens[other], fake_reference(fo, prompt_of(static_cast<uint32_t>(other), 5), 10));
}

// --- policies ------------------------------------------------------------------------------

TEST(scheduler_policy, fcfs_serves_in_arrival_order) {
  fake_options fo;
  harness h(fo, cfg(64, 1));
  h.sched.enqueue(req(1, prompt_of(1, 5), 3, 30), h.now);
  h.sched.enqueue(req(2, prompt_of(2, 5), 3, 10), h.now);
  h.sched.enqueue(req(3, prompt_of(3, 5), 3, 20), h.now);
  std::vector<uint64_t> order;
  while (h.step())
    for (auto& [id, f] : h.finished)
      if (std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 1}));
}

TEST(scheduler_policy, priority_serves_higher_first_and_preempts_lower) {
  fake_options fo;
  harness h(fo, cfg(64, 1), "priority");
  h.sched.enqueue(req(1, prompt_of(1, 5), 20, 1, /*prio*/ 0), h.now);
  h.step();
  h.step();
  ASSERT_FALSE(h.tokens[1].empty());
  h.sched.enqueue(req(2, prompt_of(2, 5), 5, 2, /*prio*/ 5), h.now);
  h.sched.enqueue(req(3, prompt_of(3, 5), 5, 3, /*prio*/ 1), h.now);
  std::vector<uint64_t> order;
  while (h.step())
    for (auto& [id, f] : h.finished)
      if (std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 1}));
  EXPECT_GE(h.finished[1].preemptions, 1);
  EXPECT_EQ(h.tokens[1], fake_reference(fo, prompt_of(1, 5), 20));
}

TEST(scheduler_policy, priority_takes_kv_blocks_from_lower_priority) {
  fake_options fo;
  fo.n_blocks = 12;  // 48 slots: the low-priority request alone fills most of them
  fo.block_size = 4;
  harness h(fo, cfg(64, 8), "priority");
  h.sched.enqueue(req(1, prompt_of(1, 30), 10, 1, /*prio*/ 0), h.now);
  h.step();
  h.step();
  h.sched.enqueue(req(2, prompt_of(2, 20), 5, 2, /*prio*/ 9), h.now);
  h.run();
  EXPECT_GE(h.finished[1].preemptions, 1);
  EXPECT_EQ(h.finished[2].preemptions, 0);
  EXPECT_EQ(h.tokens[1], fake_reference(fo, prompt_of(1, 30), 10));
  EXPECT_EQ(h.tokens[2], fake_reference(fo, prompt_of(2, 20), 5));
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_policy, equal_priority_never_preempts) {
  fake_options fo;
  harness h(fo, cfg(64, 1), "priority");
  h.sched.enqueue(req(1, prompt_of(1, 5), 10, 1, 3), h.now);
  h.step();
  h.sched.enqueue(req(2, prompt_of(2, 5), 2, 2, 3), h.now);
  h.run();
  EXPECT_EQ(h.finished[1].preemptions, 0);
}

TEST(scheduler_policy, sjf_serves_shortest_first) {
  fake_options fo;
  harness h(fo, cfg(64, 1), "sjf");
  h.sched.enqueue(req(1, prompt_of(1, 5), 40, 1), h.now);
  h.sched.enqueue(req(2, prompt_of(2, 5), 4, 2), h.now);
  h.sched.enqueue(req(3, prompt_of(3, 5), 10, 3), h.now);
  std::vector<uint64_t> order;
  while (h.step())
    for (auto& [id, f] : h.finished)
      if (std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 1}));
}

TEST(scheduler_policy, sjf_aging_lets_long_requests_through) {
  // Without aging the long request would wait behind an endless stream of short ones.
  auto p = policy("sjf", {{{"aging_tokens_per_s", 100.0}}});
  seq_view long_old{1, 0, 0, 5, 0, 200, 5};
  seq_view short_at_1s{2, 1'000'000, 0, 5, 0, 10, 5};
  seq_view short_at_3s{3, 3'000'000, 0, 5, 0, 10, 5};
  EXPECT_TRUE(p->before(short_at_1s, long_old, 1'000'000));  // 205 - 100 > 15
  EXPECT_TRUE(p->before(long_old, short_at_3s, 3'000'000));  // 205 - 300 < 15
  fake_options fo;
  harness h(fo, cfg(64, 1), "sjf", {{{"aging_tokens_per_s", 2000.0}}});
  h.sched.enqueue(req(1, prompt_of(1, 5), 30, h.now), h.now);
  uint64_t id = 2;
  bool long_done = false;
  for (int i = 0; i < 2000 && !long_done; ++i) {
    if (i % 2 == 0) h.sched.enqueue(req(id, prompt_of(static_cast<uint32_t>(id), 5), 2, h.now), h.now), ++id;
    h.step();
    long_done = h.finished.count(1) != 0;
  }
  EXPECT_TRUE(long_done);
}

TEST(scheduler_policy, static_batch_admits_nobody_while_decoding) {
  fake_options fo;
  fo.n_blocks = 256;
  harness h(fo, cfg(256, 8), "static");
  h.sched.enqueue(req(1, prompt_of(1, 5), 20, 1), h.now);
  h.sched.enqueue(req(2, prompt_of(2, 5), 4, 2), h.now);
  h.step();
  h.step();
  h.sched.enqueue(req(3, prompt_of(3, 5), 4, 3), h.now);
  while (!h.finished.count(1)) {
    ASSERT_TRUE(h.step());
    if (!h.finished.count(1)) {
      EXPECT_TRUE(h.tokens[3].empty()) << "joined a running static batch";
    }
  }
  h.run();
  EXPECT_EQ(h.tokens[3], fake_reference(fo, prompt_of(3, 5), 4));
  // The fcfs policy lets it join at once.
  harness c(fo, cfg(256, 8), "fcfs");
  c.sched.enqueue(req(1, prompt_of(1, 5), 20, 1), c.now);
  c.step();
  c.step();
  c.sched.enqueue(req(3, prompt_of(3, 5), 4, 3), c.now);
  for (int i = 0; i < 8; ++i) c.step();
  EXPECT_FALSE(c.tokens[3].empty());
  EXPECT_FALSE(c.finished.count(1));
}

TEST(scheduler_policy, static_batch_is_dense_until_its_last_member_finishes) {
  fake_options fo;
  fo.n_blocks = 256;
  harness h(fo, cfg(256, 8), "static");
  h.sched.enqueue(req(1, prompt_of(1, 5), 3, 1), h.now);
  h.sched.enqueue(req(2, prompt_of(2, 5), 12, 2), h.now);
  h.run();
  // The short request ended on time, but its slot was computed until the long one finished.
  EXPECT_EQ(h.tokens[1], fake_reference(fo, prompt_of(1, 5), 3));
  EXPECT_EQ(h.tokens[2], fake_reference(fo, prompt_of(2, 5), 12));
  for (const auto& p : h.plans) EXPECT_EQ(p.entries.size(), 2u);
  EXPECT_GE(h.sched.stats().pad_tokens, 8);
  EXPECT_TRUE(h.sched.empty());
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

TEST(scheduler_policy, static_batch_waits_to_fill_up) {
  fake_options fo;
  harness h(fo, cfg(256, 3), "static", {{{"batch_wait_ms", 10.0}}});
  h.sched.enqueue(req(1, prompt_of(1, 5), 3, h.now), h.now);
  EXPECT_FALSE(h.step());            // alone, it waits for company
  h.now += 11'000;
  EXPECT_TRUE(h.step());             // until the wait is over
  h.run();
  h.sched.enqueue(req(2, prompt_of(2, 5), 3, h.now), h.now);
  h.sched.enqueue(req(3, prompt_of(3, 5), 3, h.now), h.now);
  EXPECT_FALSE(h.step());
  h.sched.enqueue(req(4, prompt_of(4, 5), 3, h.now), h.now);
  EXPECT_TRUE(h.step());             // or until the batch is full
  EXPECT_EQ(h.plans.back().entries.size(), 3u);
  h.run();
  EXPECT_EQ(h.tokens[4], fake_reference(fo, prompt_of(4, 5), 3));
}

TEST(policy_registry, duplicate_unknown_and_options) {
  named_registry<policy_factory> r{"scheduling policy"};
  auto f = [](const policy_options&) -> result<std::unique_ptr<scheduling_policy>> { return make_error("unused"); };
  EXPECT_TRUE(r.add("mine", f).ok());
  auto dup = r.add("mine", f);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().find("twice"), std::string::npos);
  auto& g = scheduling_policy_registry();
  for (auto n : {"fcfs", "priority", "sjf", "static"}) EXPECT_TRUE(g.contains(n)) << n;
  auto unknown = g.make("lottery");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("fcfs, priority, sjf, static"), std::string::npos) << unknown.error();
  auto bad = g.make("sjf", {{{"agin", 1.0}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("aging_tokens_per_s"), std::string::npos) << bad.error();
  EXPECT_FALSE(g.make("sjf", {{{"aging_tokens_per_s", 0.0}}}).ok());
  // A program's own policy is added the same way; a taken name is refused.
  EXPECT_FALSE(g.add("fcfs", f).ok());
}

// --- Speculative decoding (scheduler_config::speculative) ------------------------------------

namespace {

scheduler_config spec_cfg(const std::string& method, int32_t k = 4, int32_t ngram_min = 1, int32_t max_batch = 0) {
  auto c = cfg(/*budget*/ 256, /*seqs*/ 16);
  c.speculative.method = method;
  c.speculative.k = k;
  c.speculative.ngram_min = ngram_min;
  c.speculative.ngram_max = 3;
  c.speculative.max_batch = max_batch;
  return c;
}

// A copy-heavy text: the fake model repeats a 9-token script (the token after n tokens is
// script[(n - 1) % 9]), so after a prompt holding the script the next tokens can be looked up.
fake_options copying(std::vector<int32_t> script = {40, 41, 42, 43, 44, 45, 46, 47, 48}) {
  fake_options fo;
  fo.n_blocks = 512;
  fo.script = std::move(script);
  return fo;
}

std::vector<int32_t> repeated(const std::vector<int32_t>& script, size_t n) {
  std::vector<int32_t> p;
  for (size_t i = 0; i < n; ++i) p.push_back(script[i % script.size()]);
  return p;
}

}  // namespace

// Greedy outputs with speculation (every proposer) are those without it, token for token, at
// batch 1 and 16, on copy-heavy and on hash (unpredictable) texts; guesses were accepted where
// the text is predictable, the KV accounting is back to idle, and the usage counts what was proposed.
TEST(scheduler_state, speculation_keeps_outputs_and_returns_kv_to_idle) {
  for (const std::string method : {"ngram", "suffix"})
  for (bool copy : {true, false})
    for (uint64_t batch : {uint64_t{1}, uint64_t{16}}) {
      fake_options fo = copy ? copying() : fake_options{};
      fo.n_blocks = 512;
      fo.eog_every = copy ? 0 : 9;
      harness plain(fo, spec_cfg("off")), spec(fo, spec_cfg(method));
      for (uint64_t i = 1; i <= batch; ++i) {
        auto p = copy ? repeated(fo.script, 10 + i) : prompt_of(static_cast<uint32_t>(i), 12);
        if (!copy) p.insert(p.end(), p.begin(), p.end());  // something to look up, though the text will not follow it
        plain.sched.enqueue(req(i, p, 40), plain.now);
        spec.sched.enqueue(req(i, p, 40), spec.now);
      }
      plain.run();
      spec.run();
      const std::string what = method + " " + (copy ? "copy-heavy" : "hash") + " batch " + std::to_string(batch);
      int64_t proposed = 0, accepted = 0;
      for (uint64_t i = 1; i <= batch; ++i) {
        EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << what << " request " << i;
        ASSERT_TRUE(spec.finished.count(i)) << what;
        EXPECT_EQ(spec.finished[i].reason, plain.finished[i].reason) << what;
        EXPECT_EQ(spec.finished[i].usage.completion_tokens, plain.finished[i].usage.completion_tokens);
        EXPECT_EQ(plain.finished[i].usage.speculative_proposed, 0);
        proposed += spec.finished[i].usage.speculative_proposed;
        accepted += spec.finished[i].usage.speculative_accepted;
      }
      EXPECT_EQ(spec.sched.stats().spec_proposed, proposed) << what;
      EXPECT_EQ(spec.sched.stats().spec_accepted, accepted) << what;
      if (copy) {
        EXPECT_GT(accepted, proposed / 2) << what;
        // At least 40% of the steps saved (suffix guesses at most 2 tokens per matched token, so
        // its first guesses after a short match are shorter than ngram's).
        EXPECT_LT(spec.plans.size() * 10, plain.plans.size() * 6) << what << ": speculation saved too few steps";
      }
      EXPECT_TRUE(spec.sched.empty()) << what;
      EXPECT_EQ(spec.sched.kv().pool().available(), fo.n_blocks) << what;
      EXPECT_EQ(spec.sched.kv().usage().blocks_used, 0) << what;
    }
}

// A step that accepts several tokens still ends the request at max_tokens (no token past it)
// and at an end-of-generation token (none after it), though the guesses reached past both.
TEST(scheduler_state, speculation_ends_at_max_tokens_and_at_eog_inside_an_accepted_run) {
  {
    auto fo = copying();
    harness h(fo, spec_cfg("ngram", /*k*/ 8));
    auto p = repeated(fo.script, 20);
    h.sched.enqueue(req(1, p, 7), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 7));
    EXPECT_EQ(h.finished[1].reason, finish::length);
    EXPECT_GT(h.finished[1].usage.speculative_accepted, 0);
    for (const auto& plan : h.plans)
      for (const auto& e : plan.entries) EXPECT_LE(e.proposal.size(), 6u);  // 7 - 1 generated first
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
  }
  {
    auto fo = copying({10, 11, 12, 13, 14, 15, 256, 16, 17});
    harness h(fo, spec_cfg("ngram", /*k*/ 6));
    auto p = repeated(fo.script, 18);
    h.sched.enqueue(req(1, p, 40), h.now);
    h.run();
    const auto ref = fake_reference(fo, p, 40);
    ASSERT_LT(ref.size(), 40u);
    EXPECT_EQ(h.tokens[1], ref);
    EXPECT_EQ(h.finished[1].reason, finish::stop);
    bool eog_proposed = false;
    for (const auto& plan : h.plans)
      for (const auto& e : plan.entries)
        eog_proposed = eog_proposed || std::find(e.proposal.begin(), e.proposal.end(), 256) != e.proposal.end();
    EXPECT_TRUE(eog_proposed) << "the test meant the guesses to run past the end";
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
  }
}

// A request chooses its own method ("off" overrides the server's); an unknown one fails at once,
// naming the known ones. Above max_batch running sequences nobody speculates.
TEST(scheduler_state, speculation_per_request_and_above_the_batch_bound) {
  auto fo = copying();
  harness h(fo, spec_cfg("ngram", 4, 1, /*max_batch*/ 2));
  auto p = repeated(fo.script, 12);
  auto off = req(1, p, 30);
  off.speculative = "off";
  auto bad = req(2, p, 30);
  bad.speculative = "eagle";
  h.sched.enqueue(off, h.now);
  h.sched.enqueue(bad, h.now);
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 30));
  EXPECT_EQ(h.finished[1].usage.speculative_proposed, 0);
  ASSERT_TRUE(h.failed.count(2));
  EXPECT_EQ(h.failed[2].code, errc::invalid_request);
  EXPECT_NE(h.failed[2].message.find("'eagle'"), std::string::npos) << h.failed[2].message;
  EXPECT_NE(h.failed[2].message.find("ngram"), std::string::npos) << h.failed[2].message;

  harness many(fo, spec_cfg("ngram", 4, 1, /*max_batch*/ 2));
  for (uint64_t i = 1; i <= 4; ++i) many.sched.enqueue(req(i, p, 30), many.now);
  many.run();
  for (const auto& plan : many.plans) {
    size_t proposing = 0;
    for (const auto& e : plan.entries) proposing += e.proposal.empty() ? 0 : 1;
    if (plan.entries.size() > 2) EXPECT_EQ(proposing, 0u) << "step " << plan.step;
  }
  for (uint64_t i = 1; i <= 4; ++i) EXPECT_EQ(many.tokens[i], fake_reference(fo, p, 30)) << i;
}

// Guesses that keep failing stop being made: after the rolling acceptance falls below
// min_acceptance the request decodes plainly for probe_steps steps, then probes once more.
TEST(scheduler_state, speculation_backs_off_when_guesses_fail) {
  // After the prompt 40 41 42 the text goes 40 41 50, 40 41 51, 40 41 52, ...: each time the tail
  // 40 41 comes back, the history guesses what followed it last time, and is wrong.
  fake_options fo;
  fo.n_blocks = 512;
  fo.script = {0, 0};
  for (int32_t i = 0; i < 12; ++i) fo.script.insert(fo.script.end(), {40, 41, 50 + i});
  const std::vector<int32_t> p = {40, 41, 42};
  auto tries = [&](double min_acceptance) {
    auto c = spec_cfg("ngram", 4, 2);
    c.speculative.min_acceptance = min_acceptance;
    c.speculative.probe_steps = 10;
    harness h(fo, c);
    h.sched.enqueue(req(1, p, 33), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 33));
    EXPECT_EQ(h.finished[1].usage.speculative_accepted, 0);
    int n = 0;
    for (const auto& plan : h.plans) n += plan.entries[0].proposal.empty() ? 0 : 1;
    return n;
  };
  const int always = tries(0.0), backing_off = tries(0.5);
  EXPECT_GE(always, 8);
  // Two failures bring the rolling rate (half weight per step) under 0.5; then a probe after 10
  // steps, and after 20 when that one fails too.
  EXPECT_GE(backing_off, 2);
  EXPECT_LE(backing_off, 4);
}

// The batch bound is measured, not configured (max_batch 0): with step times that grow steeply
// with the tokens fed (compute-bound), 16 sequences do not speculate, since 4 verified positions
// would cost the whole batch more than the accepted tokens save; one sequence alone does. With
// nearly flat step times (memory-bound) the 16 do. The outputs are the same in every case.
TEST(scheduler_state, speculation_stops_where_the_measured_step_cost_is_high) {
  auto fo = copying();
  auto p = repeated(fo.script, 20);
  auto proposals = [&](int64_t us_per_token, uint64_t batch, size_t min_entries) {
    harness h(fo, spec_cfg("ngram", 4, 1, /*max_batch*/ 0));
    h.step_us = [&](const step_plan& plan) { return 1000 + us_per_token * plan.n_tokens(); };
    for (uint64_t i = 1; i <= batch; ++i) h.sched.enqueue(req(i, p, 40), h.now);
    h.run();
    for (uint64_t i = 1; i <= batch; ++i) EXPECT_EQ(h.tokens[i], fake_reference(fo, p, 40)) << i;
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
    size_t n = 0;
    for (const auto& plan : h.plans)
      if (plan.entries.size() >= min_entries)
        for (const auto& e : plan.entries) n += e.proposal.size();
    return n;
  };
  EXPECT_EQ(proposals(/*compute-bound*/ 400, 16, 8), 0u);
  EXPECT_GT(proposals(/*compute-bound*/ 400, 1, 1), 0u);
  EXPECT_GT(proposals(/*memory-bound*/ 10, 16, 8), 0u);
}

namespace {

// A proposer that knows copying()'s script (the token after n tokens is script[(n - 1) % 9]):
// it guesses the true continuation, but with the guess at `wrong_at` (0-based; -1: none) off by
// one. Registered once under test names.
class script_oracle final : public proposer {
 public:
  script_oracle(std::vector<int32_t> script, int wrong_at) : script_(std::move(script)), wrong_at_(wrong_at) {}
  std::string name() const override { return "test_oracle"; }
  std::vector<int32_t> propose(uint64_t, const std::vector<int32_t>& context, int32_t max_k) override {
    std::vector<int32_t> g;
    for (int32_t j = 0; j < max_k; ++j) {
      const size_t n = context.size() + static_cast<size_t>(j);  // tokens before the guessed one
      g.push_back(script_[(n - 1) % script_.size()] + (j == wrong_at_ ? 1 : 0));
    }
    return g;
  }

 private:
  std::vector<int32_t> script_;
  int wrong_at_;
};

void register_oracles() {
  static const bool once = [] {
    for (int wrong_at : {-1, 1}) {
      const std::string name = wrong_at < 0 ? "test_oracle" : "test_oracle_wrong_at_2";
      const auto st = proposer_registry().add(name, [wrong_at](const speculative_config&) -> result<std::unique_ptr<proposer>> {
        return std::unique_ptr<proposer>(new script_oracle(copying().script, wrong_at));
      });
      EXPECT_TRUE(st.ok()) << st.error();
    }
    return true;
  }();
  (void)once;
}

}  // namespace

// k follows the accepted run (scheduler_state::spec_k): a request whose guesses keep failing at
// the second ends up proposing 2 (its run of 1, plus one to probe) and keeps its acceptance rate
// at 50% by it (4 guesses of which 1 kept would read 25%, under min_acceptance); one whose
// guesses are all kept goes on proposing k.
TEST(scheduler_state, speculation_adapts_k_to_the_accepted_run) {
  register_oracles();
  auto sizes = [](const harness& h) {
    std::vector<size_t> v;
    for (const auto& plan : h.plans)
      for (const auto& e : plan.entries)
        if (!e.proposal.empty()) v.push_back(e.proposal.size());
    return v;
  };
  auto show = [](const std::vector<size_t>& v) {
    std::string s;
    for (auto x : v) s += std::to_string(x) + " ";
    return s;
  };
  auto fo = copying();
  auto p = repeated(fo.script, 20);
  {
    harness h(fo, spec_cfg("test_oracle_wrong_at_2", /*k*/ 6));
    h.sched.enqueue(req(1, p, 60), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 60));
    const auto v = sizes(h);
    ASSERT_GE(v.size(), 12u) << show(v);
    EXPECT_EQ(v.front(), 6u) << show(v);
    // From the prior of k, the run falls towards 1 (6, 5, 3, 3, 2, ...) and k settles at 2.
    for (size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i], v[i - 1]) << "proposal " << i << ": " << show(v);
    for (size_t i = 4; i + 1 < v.size(); ++i) EXPECT_EQ(v[i], 2u) << "proposal " << i << ": " << show(v);
    const auto& f = h.finished[1].usage;
    EXPECT_EQ(f.speculative_accepted, static_cast<int32_t>(v.size())) << "one kept a step";
    EXPECT_GT(f.speculative_accepted * 10, f.speculative_proposed * 4) << show(v);
  }
  {
    harness h(fo, spec_cfg("test_oracle", /*k*/ 5));
    h.sched.enqueue(req(1, p, 60), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 60));
    const auto v = sizes(h);
    ASSERT_GE(v.size(), 5u) << show(v);
    for (size_t i = 0; i + 1 < v.size(); ++i) EXPECT_EQ(v[i], 5u) << "proposal " << i << ": " << show(v);
    EXPECT_EQ(h.finished[1].usage.speculative_accepted, h.finished[1].usage.speculative_proposed);
  }
}

// Penalties and logit_bias apply per verified position (the executor moves the window along the
// guesses): a copy-heavy text whose repeats the penalties push the model off, greedy and seeded,
// gives the same tokens with every proposer as without, though guesses are rejected.
TEST(scheduler_state, speculation_with_penalties_keeps_outputs) {
  for (const std::string method : {"ngram", "suffix"})
    for (float temperature : {0.0f, 0.8f}) {
      auto fo = copying();
      auto p = repeated(fo.script, 20);
      harness plain(fo, spec_cfg("off")), spec(fo, spec_cfg(method));
      for (uint64_t i = 1; i <= 3; ++i) {
        auto r = req(i, p, 40);
        r.sampling.temperature = temperature;
        r.sampling.seed = i;
        // The fake model's pick has logit 10, the others 0: a token 5 times or more in the window
        // loses to them.
        r.sampling.frequency_penalty = 2.0f;
        r.sampling.penalty_last_n = 36 + static_cast<int32_t>(i) * 4;
        r.sampling.logit_bias = {{47, -100.0f}};
        plain.sched.enqueue(r, plain.now);
        spec.sched.enqueue(r, spec.now);
      }
      plain.run();
      spec.run();
      const std::string what = method + " temperature " + std::to_string(temperature);
      int64_t proposed = 0, accepted = 0;
      for (uint64_t i = 1; i <= 3; ++i) {
        EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << what << " request " << i;
        EXPECT_EQ(std::count(plain.tokens[i].begin(), plain.tokens[i].end(), 47), 0) << what;
        proposed += spec.finished[i].usage.speculative_proposed;
        accepted += spec.finished[i].usage.speculative_accepted;
      }
      EXPECT_GT(accepted, 0) << what;
      EXPECT_EQ(spec.sched.kv().pool().available(), fo.n_blocks) << what;
    }
}

#pragma once
// What the scheduler_state tests share (scheduler_state_test.cpp, scheduler_speculation_test.cpp):
// requests, prompts, and a harness that runs scheduler_state and executor_state over the fake
// backend in lock step.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "actors/executor/executor_state.hpp"
#include "actors/scheduler/scheduler_state.hpp"
#include "tests/support/fake_backend.hpp"

namespace troupe::actors::test_support {

using troupe::test::fake_backend;
using troupe::test::fake_options;
using troupe::test::fake_reference;

inline std::unique_ptr<scheduling_policy> policy(const std::string& name, policy_options o = {}) {
  auto p = scheduling_policy_registry().make(name, o);
  EXPECT_TRUE(p.ok()) << p.error();
  return std::move(p.value());
}

inline admitted_request req(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, int64_t arrival = 0,
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

inline std::vector<int32_t> prompt_of(uint32_t seed, size_t n) {
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

inline scheduler_config cfg(int32_t budget = 64, int32_t seqs = 8, bool prefix = true, int32_t depth = 2) {
  scheduler_config c;
  c.max_batched_tokens = budget;
  c.max_num_seqs = seqs;
  c.prefix_caching = prefix;
  c.max_steps_in_flight = depth;
  return c;
}

}  // namespace troupe::actors::test_support

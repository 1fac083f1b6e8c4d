// scheduler_state driven directly, with executor_state over the fake backend: continuous
// batching, token budget, chunked prefill, prefix reuse, preemption by recompute, pipelined
// planning, deadlines, pause, executor reset, and each built-in policy. Speculative decoding's
// tests are in scheduler_speculation_test.cpp.
#include "actors/scheduler/scheduler_state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "tests/actors/scheduler/scheduler_harness.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::test_support;

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

// A continuation after a replica died carries the tokens generated there at the end of its
// prompt: the engine must compute them as the decoded tokens they were (model::batch_sequence::
// n_prompt: llama.cpp's order sums a prompt's attention otherwise), so every step names the
// prompt the client sent, not the longer one.
TEST(scheduler_state, a_continuations_steps_name_the_clients_prompt) {
  fake_options fo;
  harness h(fo, cfg(8, 8));
  auto r = req(1, prompt_of(7, 10), 6);
  const auto generated = fake_reference(fo, r.prompt, 3);
  r.prompt.insert(r.prompt.end(), generated.begin(), generated.end());
  r.generated_before = 3;
  r.max_tokens = 3;
  h.sched.enqueue(std::move(r), h.now);
  h.run();
  ASSERT_TRUE(h.finished.count(1));
  EXPECT_EQ(h.finished[1].usage.prompt_tokens, 10);
  EXPECT_EQ(h.finished[1].usage.completion_tokens, 6);
  auto all = generated;
  all.insert(all.end(), h.tokens[1].begin(), h.tokens[1].end());
  EXPECT_EQ(all, fake_reference(fo, prompt_of(7, 10), 6));
  int entries = 0;
  for (const auto& p : h.plans)
    for (const auto& e : p.entries) {
      EXPECT_EQ(e.n_prompt, 10) << "n_past " << e.n_past;
      ++entries;
    }
  EXPECT_GE(entries, 4);  // the 13 known tokens in 8-token chunks, then the decodes
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

// A deadline that passes while the prompt's prefill runs: the token that step sampled is not
// delivered, and the request fails (deadline) as one still queued does, not a done with 0 tokens
// or a first token past its deadline.
TEST(scheduler_state, a_deadline_passed_during_prefill_fails_without_a_token) {
  fake_options fo;
  harness h(fo, cfg(64, /*seqs*/ 1));
  auto a = req(1, prompt_of(1, 5), 100);
  a.deadline_us = h.now + 1;
  h.sched.enqueue(a, h.now);
  h.run();
  ASSERT_TRUE(h.failed.count(1));
  EXPECT_EQ(h.failed[1].code, errc::deadline);
  EXPECT_TRUE(h.tokens[1].empty());
  EXPECT_FALSE(h.finished.count(1));
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

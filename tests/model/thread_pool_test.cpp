#include "model/thread_pool.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

using troupe::model::thread_pool;

TEST(ThreadPool, SizeCountsTheCaller) {
  thread_pool one(1);
  EXPECT_EQ(one.size(), 1);
  thread_pool three(3);
  EXPECT_EQ(three.size(), 3);
  thread_pool hw(0);
  EXPECT_GE(hw.size(), 1);
}

TEST(ThreadPool, RunCallsEveryIndexOnceWithCallerAsZero) {
  for (int n : {1, 2, 3, 5}) {
    thread_pool pool(n);
    std::vector<int> calls(static_cast<size_t>(n), 0);  // each slot written by one thread only
    std::vector<std::thread::id> ids(static_cast<size_t>(n));
    pool.run([&](int ith, int nth) {
      EXPECT_EQ(nth, n);
      calls[static_cast<size_t>(ith)] += 1;
      ids[static_cast<size_t>(ith)] = std::this_thread::get_id();
    });
    for (int c : calls) EXPECT_EQ(c, 1);
    EXPECT_EQ(ids[0], std::this_thread::get_id());
  }
}

// Many back-to-back runs, as a decode step does: no run is lost or doubled, and plain
// (non-atomic) writes made by workers are visible to the caller after run() returns.
TEST(ThreadPool, ManyRunsBackToBack) {
  thread_pool pool(2);
  std::vector<int64_t> slot(2, 0);
  constexpr int runs = 2000;
  for (int i = 0; i < runs; ++i) {
    pool.run([&](int ith, int) { slot[static_cast<size_t>(ith)] += ith + 1; });
  }
  EXPECT_EQ(slot[0], runs);
  EXPECT_EQ(slot[1], 2 * runs);
}

// Pauses longer than the spin budget make workers (and the caller) sleep on the condition
// variables; every run must still wake them.
TEST(ThreadPool, WakesSleepingWorkers) {
  thread_pool pool(3);
  std::atomic<int> total{0};
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    pool.run([&](int, int) { total.fetch_add(1); });
  }
  EXPECT_EQ(total.load(), 15);
}

// A worker slower than the caller's spin budget: the caller must sleep and be woken.
TEST(ThreadPool, CallerWaitsForSlowWorker) {
  thread_pool pool(2);
  int worker_done = 0;
  pool.run([&](int ith, int) {
    if (ith == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      worker_done = 1;
    }
  });
  EXPECT_EQ(worker_done, 1);
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  thread_pool pool(3);
  for (int64_t n : {0, 1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      EXPECT_LT(b, e);
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, RunChunksRunsEveryChunkExactlyOnce) {
  for (int n : {1, 2, 3}) {
    thread_pool pool(n);
    for (int64_t chunks : {0, 1, 2, 3, 17, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(chunks));
      pool.run_chunks(chunks, [&](int64_t c) { hits[static_cast<size_t>(c)].fetch_add(1); });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1) << "threads " << n << " chunks " << chunks;
    }
  }
}

// A chunk that blocks its thread (as a descheduled worker would): the call still completes with
// every chunk run, the rest going to whichever thread is free.
TEST(ThreadPool, RunChunksCompletesAroundASlowChunk) {
  thread_pool pool(2);
  std::vector<std::thread::id> ran_by(20);
  pool.run_chunks(20, [&](int64_t c) {
    if (c == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ran_by[static_cast<size_t>(c)] = std::this_thread::get_id();
  });
  for (auto& id : ran_by) EXPECT_NE(id, std::thread::id());
}

// Back-to-back jobs of both kinds, as a decode step issues them (matmuls are chunk jobs, other
// ops per-thread jobs): workers that arrive late for a chunk job must neither run a chunk twice
// nor miss the per-thread job that follows it.
TEST(ThreadPool, InterleavedRunAndChunkJobs) {
  thread_pool pool(2);
  std::atomic<int64_t> chunk_sum{0};
  std::vector<int64_t> per_thread(2, 0);
  constexpr int rounds = 1000;
  for (int i = 0; i < rounds; ++i) {
    pool.run_chunks(4, [&](int64_t c) { chunk_sum.fetch_add(c + 1); });
    pool.run([&](int ith, int) { per_thread[static_cast<size_t>(ith)] += 1; });
    pool.parallel_for(3, [&](int64_t b, int64_t e) { chunk_sum.fetch_add(e - b); });
  }
  EXPECT_EQ(chunk_sum.load(), rounds * (10 + 3));
  EXPECT_EQ(per_thread[0], rounds);
  EXPECT_EQ(per_thread[1], rounds);
}

TEST(ThreadPool, ShutsDownCleanlyInEveryState) {
  { thread_pool pool(4); }  // workers possibly not even started waiting yet
  {
    thread_pool pool(2);
    pool.run([](int, int) {});
  }  // workers spinning
  {
    thread_pool pool(2);
    pool.run([](int, int) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }  // workers asleep
  SUCCEED();
}

#pragma once
// A persistent pool of worker threads: created once, reused by every step (no threads per step).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::model {

class thread_pool {
 public:
  // n_threads total workers including the calling thread; 0 = hardware concurrency.
  explicit thread_pool(int n_threads = 0);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) on every worker (the caller is worker 0) and returns
  // when all are done. Not reentrant: one run at a time per pool. fn must not throw.
  void run(const std::function<void(int ith, int nth)>& fn);

  // Runs fn(chunk) once for every chunk in [0, n_chunks) and returns when all are done. Chunks
  // go to whichever threads are running (the caller takes them too); a worker the OS has not
  // scheduled in time simply takes none, so on a busy machine a call slows down to the
  // caller's own speed instead of stalling until the worker gets a core. Same rules as run().
  void run_chunks(int64_t n_chunks, const std::function<void(int64_t chunk)>& fn);

  // Splits [0, n) into contiguous chunks across the workers (dynamically, as run_chunks).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int ith);
  void publish(uint64_t kind);
  bool wait_for_work(uint64_t seen);
  void wait_until(const std::atomic<int64_t>& counter, int64_t target);
  void take_chunks();
  void notify_caller();

  int n_threads_;
  std::vector<std::thread> workers_;
  // A decode step dispatches ~200 small jobs, so both directions of the hand-off spin on
  // atomics for a short while before falling back to the mutex + condition variables;
  // `sleepers_` / `caller_sleeping_` tell the other side whether a notify is needed at all.
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  // The hand-off's fields sit on cache lines by who writes them: a line the worker spins on is
  // not written by the caller for anything else, so it moves between the cores once per job.
  // Sharing one line cost a 4-chunk job ~0.9 us more (BM_pool_run_chunks, 1.29 vs 0.41 us,
  // Xeon model 167, 2026-12-06).
  // Each job bumps generation_ (sequence << 1 | kind bit: 0 = run(), 1 = run_chunks()). job_
  // (run()'s job, published by the bump; run() waits for every worker, so it is never rewritten
  // while a worker may read it) is read right after it.
  alignas(64) std::atomic<uint64_t> generation_{0};
  const std::function<void(int, int)>* job_ = nullptr;
  uint64_t sequence_ = 0;  // caller-only
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<int64_t> pending_{0};
  // run_chunks(): workers may arrive late, after the call returned, so they only ever reach the
  // chunk function through a successful claim. claim_ holds (chunk job id << 32 | next chunk);
  // a claim is a CAS on it, which fails once the job has moved on.
  alignas(64) std::atomic<uint64_t> claim_{0};
  std::atomic<const std::function<void(int64_t)>*> chunk_fn_{nullptr};
  std::atomic<int64_t> n_chunks_{0};
  alignas(64) std::atomic<int64_t> chunks_done_{0};
};

}  // namespace troupe::model

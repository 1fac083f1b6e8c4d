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

  // Splits [0, n) into contiguous chunks across the workers.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int ith);
  bool wait_for_work(uint64_t seen);
  void wait_for_workers();

  int n_threads_;
  std::vector<std::thread> workers_;
  // A decode step dispatches ~200 small jobs, so both directions of the hand-off spin on
  // atomics for a short while before falling back to the mutex + condition variables;
  // `sleepers_` / `caller_sleeping_` tell the other side whether a notify is needed at all.
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int, int)>* job_ = nullptr;  // published by the generation bump
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace troupe::model

#pragma once
// A persistent pool of worker threads: created once, reused by every step (no threads per step).
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
  // when all are done. Not reentrant: one run at a time per pool.
  void run(const std::function<void(int ith, int nth)>& fn);

  // Splits [0, n) into contiguous chunks across the workers.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int ith);
  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int, int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace troupe::model

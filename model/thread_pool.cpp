#include "model/thread_pool.hpp"

#include <chrono>

namespace troupe::model {

namespace {

using clock_type = std::chrono::steady_clock;

// How long either side of a hand-off busy-waits before sleeping. Jobs inside a decode step are
// a few microseconds apart, so the spin almost always wins; between steps (sampling, actor
// messages) the wait can be long, and then sleeping frees the core.
constexpr auto k_spin_budget = std::chrono::microseconds(200);
// The first iterations only `pause`; later ones yield, so that an oversubscribed machine (more
// pool threads than cores, sanitizer runs) still lets the thread we wait for make progress.
constexpr uint32_t k_pause_iterations = 2048;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() holds or the budget is spent; returns done().
template <class Pred>
bool spin_until(Pred done) {
  const auto deadline = clock_type::now() + k_spin_budget;
  for (uint32_t i = 0;; ++i) {
    if (done()) return true;
    if ((i & 255) == 255 && clock_type::now() >= deadline) return done();
    if (i < k_pause_iterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace

thread_pool::thread_pool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = n_threads > 0 ? n_threads : 1;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    cv_start_.notify_all();
  }
  for (auto& t : workers_) t.join();
}

void thread_pool::run(const std::function<void(int ith, int nth)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  // seq_cst on the bump and on the sleepers_ load (paired with the worker's seq_cst increment
  // of sleepers_ and load of generation_): either the worker sees the new generation before it
  // sleeps, or we see it asleep and notify under the mutex. No wake-up can be lost.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_start_.notify_all();
  }
  fn(0, n_threads_);
  wait_for_workers();
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  run([&](int ith, int nth) {
    const int64_t begin = n * ith / nth;
    const int64_t end = n * (ith + 1) / nth;
    if (begin < end) fn(begin, end);
  });
}

void thread_pool::wait_for_workers() {
  const auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (spin_until(all_done)) return;
  std::unique_lock<std::mutex> lk(mu_);
  caller_sleeping_.store(true);
  cv_done_.wait(lk, [this] { return pending_.load() == 0; });
  caller_sleeping_.store(false);
}

bool thread_pool::wait_for_work(uint64_t seen) {
  const auto has_work = [this, seen] {
    return generation_.load(std::memory_order_acquire) != seen;
  };
  if (!spin_until(has_work)) {
    std::unique_lock<std::mutex> lk(mu_);
    sleepers_.fetch_add(1);
    cv_start_.wait(lk, [this, seen] { return generation_.load() != seen; });
    sleepers_.fetch_sub(1);
  }
  return !stop_.load();
}

void thread_pool::worker_loop(int ith) {
  uint64_t seen = 0;
  for (;;) {
    if (!wait_for_work(seen)) return;
    // The generation can only move on after this worker reports done (run() waits for all),
    // so reading it again here gives exactly the generation that published job_.
    seen = generation_.load(std::memory_order_acquire);
    (*job_)(ith, n_threads_);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
  }
}

}  // namespace troupe::model

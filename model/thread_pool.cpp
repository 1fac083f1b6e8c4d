#include "model/thread_pool.hpp"

#include <algorithm>
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

constexpr uint64_t k_kind_chunks = 1;                 // low bit of generation_
constexpr uint64_t k_no_chunk = 0xFFFFFFFFu;          // claim_ index while a job is being set up

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
  generation_.store(++sequence_ << 1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    cv_start_.notify_all();
  }
  for (auto& t : workers_) t.join();
}

// seq_cst on the generation store and on the sleepers_ load (paired with the worker's seq_cst
// increment of sleepers_ and load of generation_): either the worker sees the new generation
// before it sleeps, or we see it asleep and notify under the mutex. No wake-up can be lost.
void thread_pool::publish(uint64_t kind) {
  generation_.store((++sequence_ << 1) | kind);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_start_.notify_all();
  }
}

void thread_pool::run(const std::function<void(int ith, int nth)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  publish(0);
  fn(0, n_threads_);
  wait_until(pending_, 0);
}

void thread_pool::run_chunks(int64_t n_chunks, const std::function<void(int64_t)>& fn) {
  if (n_chunks <= 0) return;
  if (n_threads_ == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) fn(c);
    return;
  }
  // All seq_cst: a late worker can only claim a chunk with a CAS that sees this job's id, and
  // the id is installed only after the descriptor, behind an unclaimable index.
  const uint64_t job = (claim_.load() >> 32) + 1;
  claim_.store((job << 32) | k_no_chunk);
  chunks_done_.store(0);
  chunk_fn_.store(&fn);
  n_chunks_.store(n_chunks);
  claim_.store(job << 32);
  publish(k_kind_chunks);
  take_chunks();
  wait_until(chunks_done_, n_chunks);
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  // Two chunks per thread: balance when all run, and no wait for one that does not.
  struct range {
    int64_t n, chunks;
    const std::function<void(int64_t, int64_t)>* fn;
  } r{n, std::min<int64_t>(n, 2 * n_threads_), &fn};
  // Captures one pointer, so the std::function stores it inline (no allocation).
  run_chunks(r.chunks, [&r](int64_t c) { (*r.fn)(r.n * c / r.chunks, r.n * (c + 1) / r.chunks); });
}

void thread_pool::take_chunks() {
  for (;;) {
    uint64_t v = claim_.load();
    const auto* fn = chunk_fn_.load();
    const int64_t n = n_chunks_.load();
    const auto index = static_cast<int64_t>(v & k_no_chunk);
    if (index >= n) {
      if (claim_.load() != v) continue;  // a new job arrived while we read a stale descriptor
      return;
    }
    // Success means claim_ still held this job when fn and n were read, so they are its own.
    if (!claim_.compare_exchange_strong(v, v + 1)) continue;
    (*fn)(index);
    chunks_done_.fetch_add(1);
    notify_caller();
  }
}

void thread_pool::notify_caller() {
  // Paired with wait_until(): the counter update above and this load are seq_cst, as are the
  // caller's store of caller_sleeping_ and its re-check of the counter under the mutex.
  if (caller_sleeping_.load()) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_done_.notify_one();
  }
}

void thread_pool::wait_until(const std::atomic<int64_t>& counter, int64_t target) {
  if (spin_until([&] { return counter.load(std::memory_order_acquire) == target; })) return;
  std::unique_lock<std::mutex> lk(mu_);
  caller_sleeping_.store(true);
  cv_done_.wait(lk, [&] { return counter.load() == target; });
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
    // Reading the generation again may skip chunk jobs that finished without us (fine: their
    // callers did the work), but never a run() job: run() cannot complete, and so no later job
    // can be published, until this worker has done its part.
    seen = generation_.load(std::memory_order_acquire);
    if (seen & k_kind_chunks) {
      take_chunks();
      continue;
    }
    (*job_)(ith, n_threads_);
    pending_.fetch_sub(1);
    notify_caller();
  }
}

}  // namespace troupe::model

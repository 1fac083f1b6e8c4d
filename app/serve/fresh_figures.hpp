#pragma once
// /metrics and /health answer with figures gathered after they were asked, so that a client
// that reads them right after its answer sees its sequence and KV blocks gone (not the
// poller's last round, up to 2 s old). The I/O thread does not wait: a request is held (its
// `then`) until the poller (woken by `wake`) has finished a round that began after it, or
// max_wait has passed (a pipeline too busy to answer: the last figures). Rounds are shared:
// every request held when a round began is answered by it. Thread-safe: requests come from the
// I/O threads, rounds from the poller; `then` and `wake` run without the lock held.
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace troupe::app {

class fresh_figures {
 public:
  static constexpr auto max_wait = std::chrono::milliseconds(500);

  // A request: `then` runs once a round that began after this call is done (at once when no
  // poller is set).
  void hold(std::function<void()> then);
  // The poller's side: how it is woken. Unset (the poller stopping): every request held is
  // answered, and later ones at once.
  void set_waker(std::function<void()> wake);
  // The requests asked so far (a round that reads this before it begins answers them).
  uint64_t asked() const;
  bool holding() const;
  // A round that began when asked() was `upto` is done (0: none was): the requests it covers
  // are answered, and those held longer than max_wait.
  void answered(uint64_t upto);

 private:
  struct held_request {
    uint64_t ticket = 0;
    std::chrono::steady_clock::time_point since;
    std::function<void()> then;
  };
  mutable std::mutex mu_;
  std::function<void()> wake_;
  uint64_t asked_ = 0;
  std::vector<held_request> held_;
};

}  // namespace troupe::app

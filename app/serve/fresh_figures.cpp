#include "app/serve/fresh_figures.hpp"

#include <utility>

namespace troupe::app {

void fresh_figures::hold(std::function<void()> then) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!wake_) {  // no poller (yet, or any more): the figures there are
    lock.unlock();
    return then();
  }
  held_.push_back({++asked_, std::chrono::steady_clock::now(), std::move(then)});
  auto wake = wake_;
  lock.unlock();
  wake();
}

void fresh_figures::set_waker(std::function<void()> wake) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_ = std::move(wake);
  if (wake_) return;
  auto all = std::exchange(held_, {});
  lock.unlock();
  for (auto& h : all) h.then();
}

uint64_t fresh_figures::asked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return asked_;
}

bool fresh_figures::holding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !held_.empty();
}

void fresh_figures::answered(uint64_t upto) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<held_request> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->ticket <= upto || now - it->since >= max_wait) {
        ready.push_back(std::move(*it));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& h : ready) h.then();
}

}  // namespace troupe::app

#pragma once
// For an actor that hands its state to a successor (hot reload): once handed over, every message
// that still reaches it is passed on — held until the successor's handle is known, then sent in
// the order it arrived. The old actor exits after a grace period; by then its peers talk to the
// successor directly.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace troupe::actors::detail {

// How long a replaced actor keeps forwarding: peers learn the new handle within milliseconds.
inline constexpr int64_t forward_grace_ms = 10000;

template <class Handle>
class successor_link {
 public:
  bool handed_over() const { return handed_over_; }
  void hand_over() { handed_over_ = true; }
  const Handle& successor() const { return succ_; }

  // Runs f(successor) now, or once set() names it.
  void pass(std::function<void(Handle&)> f) {
    if (succ_) f(succ_);
    else held_.push_back(std::move(f));
  }

  void set(Handle h) {
    succ_ = std::move(h);
    for (auto& f : held_) f(succ_);
    held_.clear();
  }

 private:
  bool handed_over_ = false;
  Handle succ_;
  std::vector<std::function<void(Handle&)>> held_;
};

}  // namespace troupe::actors::detail

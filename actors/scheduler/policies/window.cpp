// `window`: continuous batching (fcfs order) with a batching window. When the engine is idle
// (no sequence holds KV), the first request to arrive waits up to `window_ms` for others, or until
// `min_batch` of them wait, so that they prefill together in one step and then decode as one
// batch: fewer, fuller steps for throughput-oriented deployments, at the price of up to
// `window_ms` more time to first token for whoever arrives at an idle engine. It never delays a
// request while sequences are running: then it joins the batch at once, as under fcfs.
//
// The scheduler decides again when a request arrives and on its tick (scheduler_options::tick_ms),
// so with no further arrival a window ends at the first tick after `window_ms`.
//
// Options:
//   window_ms  (default 20) the longest an idle engine waits for a batch to gather; >= 0
//              (0 behaves as fcfs).
//   min_batch  (default 0) start at once when this many requests wait; 0: a full batch
//              (max_num_seqs). >= 0.
#include <cmath>

#include "actors/scheduler/policies/batch_window.hpp"
#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

class window final : public scheduling_policy {
 public:
  window(double window_ms, double min_batch)
      : wait_us_(static_cast<int64_t>(window_ms * 1000)), min_batch_(static_cast<int32_t>(min_batch)) {}
  std::string name() const override { return "window"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
  bool admits_new(const batch_view& b) const override {
    if (b.n_running > 0) return true;  // never hold back a request while the engine works anyway
    return idle_batch_ready(b, wait_us_, min_batch_ > 0 ? min_batch_ : b.max_num_seqs);
  }

 private:
  int64_t wait_us_;
  int32_t min_batch_;
};

}  // namespace

void add_window(named_registry<policy_factory>& r) {
  (void)r.add("window", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("window", o, {"window_ms", "min_batch"}); !s) return make_error(s.error());
    const double wait = o.get("window_ms", 20.0);
    const double min_batch = o.get("min_batch", 0.0);
    if (!(wait >= 0 && wait <= 60000)) return make_error("window: window_ms must be within 0..60000");
    if (!(min_batch >= 0 && min_batch <= 1e6 && std::floor(min_batch) == min_batch))
      return make_error("window: min_batch must be a whole number within 0..1000000");
    return std::unique_ptr<scheduling_policy>(new window(wait, min_batch));
  });
}

}  // namespace troupe::actors::policies

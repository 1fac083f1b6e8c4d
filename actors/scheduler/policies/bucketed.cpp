// `bucketed`: continuous batching (fcfs order) with length-bucketed admission: a waiting request
// joins the batch only if, with it, the longest prompt among the batch's members is at most
// `max_length_ratio` times the shortest. A batch then holds prompts of similar length, which is
// what a padded backend (or a CUDA graph captured per shape) wants: a step costs about what its
// longest member costs, and similar prompts finish their prefill together. A request that does
// not fit is skipped, not blocking the ones behind it that do.
//
// Aging: a request that has waited `max_wait_ms` joins regardless of length (fcfs order puts it
// first, so it takes the next free slot), so an outlier waits at most that long for its bucket
// to come round. While an admitted outlier runs, the batch is as wide as it makes it, and
// requests of the other length wait (up to `max_wait_ms` themselves) until it finishes.
//
// A batch that empties is started by the request first in order (the longest-waiting one),
// whatever its length: buckets take turns in arrival order, none is preferred.
//
// Prompts shorter than `min_length` tokens count as `min_length`: 3 and 12 tokens cost about the
// same, and should not be kept apart as "4x" different.
//
// Options:
//   max_length_ratio  (default 2) the largest longest/shortest prompt ratio in one batch; >= 1.
//   max_wait_ms       (default 1000) waiting this long lets a request in regardless; >= 0.
//   min_length        (default 16) prompts shorter than this count as this long; >= 1.
#include <algorithm>

#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

class bucketed final : public scheduling_policy {
 public:
  bucketed(double ratio, double max_wait_ms, double min_length)
      : ratio_(ratio), max_wait_us_(static_cast<int64_t>(max_wait_ms * 1000)), min_length_(min_length) {}
  std::string name() const override { return "bucketed"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
  bool admits(const seq_view& c, const batch_view&, const std::vector<int32_t>& members,
              int64_t now_us) const override {
    if (members.empty() || now_us - c.arrival_us >= max_wait_us_) return true;
    double lo = length(c.prompt_tokens), hi = lo;
    for (int32_t m : members) {
      lo = std::min(lo, length(m));
      hi = std::max(hi, length(m));
    }
    return hi <= ratio_ * lo;
  }

 private:
  double length(int32_t prompt_tokens) const { return std::max(min_length_, static_cast<double>(prompt_tokens)); }
  double ratio_;
  int64_t max_wait_us_;
  double min_length_;
};

}  // namespace

void add_bucketed(named_registry<policy_factory>& r) {
  (void)r.add("bucketed", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("bucketed", o, {"max_length_ratio", "max_wait_ms", "min_length"}); !s)
      return make_error(s.error());
    const double ratio = o.get("max_length_ratio", 2.0);
    const double wait = o.get("max_wait_ms", 1000.0);
    const double min_length = o.get("min_length", 16.0);
    if (!(ratio >= 1 && ratio <= 1e6)) return make_error("bucketed: max_length_ratio must be within 1..1000000");
    if (!(wait >= 0 && wait <= 3.6e6))
      return make_error("bucketed: max_wait_ms must be within 0..3600000 (it bounds how long an outlier waits)");
    if (!(min_length >= 1 && min_length <= 1e7)) return make_error("bucketed: min_length must be within 1..10000000");
    return std::unique_ptr<scheduling_policy>(new bucketed(ratio, wait, min_length));
  });
}

}  // namespace troupe::actors::policies

// `static`: classic static batching, for comparison with continuous batching. Requests join
// only while the batch is forming (no member has started generating); then the batch runs
// until its last member finishes, and only then does the next batch form. The batch is dense,
// as a padded tensor is: members that finish early keep being computed until the end (their
// streams end on time). Order is fcfs.
//
// Options:
//   batch_wait_ms  (default 0) with nothing running, wait up to this long for a full batch
//                  (max_num_seqs requests) before starting a smaller one, as a batching
//                  server's queue delay does; 0 starts with whatever is there.
#include "actors/scheduler/policies/batch_window.hpp"
#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

class static_batch final : public scheduling_policy {
 public:
  explicit static_batch(double wait_ms) : wait_us_(static_cast<int64_t>(wait_ms * 1000)) {}
  std::string name() const override { return "static"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
  bool admits_new(const batch_view& b) const override {
    if (b.n_decoding > 0) return false;  // the batch runs; nobody joins
    if (b.n_running > 0) return true;    // still forming (prefilling)
    return idle_batch_ready(b, wait_us_, b.max_num_seqs);
  }
  bool pads_finished() const override { return true; }

 private:
  int64_t wait_us_;
};

}  // namespace

void add_static(named_registry<policy_factory>& r) {
  (void)r.add("static", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("static", o, {"batch_wait_ms"}); !s) return make_error(s.error());
    const double wait = o.get("batch_wait_ms", 0.0);
    // At most an hour, as the bucketed policy's wait: beyond, a lone request would never start
    // (and a wait past int64 microseconds wrapped to none).
    if (!(wait >= 0 && wait <= 3'600'000))
      return make_error("static: batch_wait_ms must be in 0..3600000 (ms), got " + std::to_string(wait));
    return std::unique_ptr<scheduling_policy>(new static_batch(wait));
  });
}

}  // namespace troupe::actors::policies

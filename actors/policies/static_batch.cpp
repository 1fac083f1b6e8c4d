// `static`: classic static batching, for comparison with continuous batching. Requests join
// only while the batch is forming (no member has started generating); then the batch runs
// until its last member finishes, and only then does the next batch form. The batch is dense,
// as a padded tensor is: members that finish early keep being computed until the end (their
// streams end on time). Order is fcfs.
#include "actors/scheduling_policy.hpp"

namespace troupe::actors::policies {
namespace {

class static_batch final : public scheduling_policy {
 public:
  std::string name() const override { return "static"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
  bool admits_new(const batch_view& b) const override { return b.n_decoding == 0; }
  bool pads_finished() const override { return true; }
};

}  // namespace

void add_static(policy_registry& r) {
  (void)r.add("static", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("static", o, {}); !s) return make_error(s.error());
    return std::unique_ptr<scheduling_policy>(new static_batch);
  });
}

}  // namespace troupe::actors::policies

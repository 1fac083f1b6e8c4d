// `fcfs`: first come, first served. Preempts the latest arrival first; no options.
#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

class fcfs final : public scheduling_policy {
 public:
  std::string name() const override { return "fcfs"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
};

}  // namespace

void add_fcfs(named_registry<policy_factory>& r) {
  (void)r.add("fcfs", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("fcfs", o, {}); !s) return make_error(s.error());
    return std::unique_ptr<scheduling_policy>(new fcfs);
  });
}

}  // namespace troupe::actors::policies

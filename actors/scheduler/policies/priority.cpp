// `priority`: the request's priority field, higher first, then first come first served. A
// waiting request may preempt a running one of strictly lower priority (for a batch slot or for
// KV blocks); equal priorities never preempt each other, so there is no thrashing.
#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

class priority final : public scheduling_policy {
 public:
  std::string name() const override { return "priority"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
  bool may_preempt(const seq_view& waiting, const seq_view& running) const override {
    return waiting.priority > running.priority;
  }
};

}  // namespace

void add_priority(named_registry<policy_factory>& r) {
  (void)r.add("priority", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("priority", o, {}); !s) return make_error(s.error());
    return std::unique_ptr<scheduling_policy>(new priority);
  });
}

}  // namespace troupe::actors::policies

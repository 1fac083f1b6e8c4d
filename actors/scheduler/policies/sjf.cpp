// `sjf`: shortest predicted remaining work first, with aging so that nothing starves.
// Remaining work is the prompt still to compute plus the tokens still allowed (max_tokens is
// the prediction of the output length until a predictor exists). Every second of waiting
// takes `aging_tokens_per_s` tokens off a request's score, so a long request waiting behind a
// stream of short ones is served after at most (its work - theirs) / aging seconds.
//
// Options:
//   aging_tokens_per_s  (default 64) how fast waiting makes a request look shorter; > 0.
#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

class sjf final : public scheduling_policy {
 public:
  explicit sjf(double aging) : aging_(aging) {}
  std::string name() const override { return "sjf"; }
  bool before(const seq_view& a, const seq_view& b, int64_t now_us) const override {
    const double sa = score(a, now_us), sb = score(b, now_us);
    if (sa != sb) return sa < sb;
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }

 private:
  double score(const seq_view& s, int64_t now_us) const {
    const double remaining = static_cast<double>(s.to_compute) + static_cast<double>(s.max_tokens - s.generated);
    const double waited_s = static_cast<double>(now_us - s.arrival_us) * 1e-6;
    return remaining - aging_ * (waited_s > 0 ? waited_s : 0.0);
  }
  double aging_;
};

}  // namespace

void add_sjf(named_registry<policy_factory>& r) {
  (void)r.add("sjf", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("sjf", o, {"aging_tokens_per_s"}); !s) return make_error(s.error());
    const double aging = o.get("aging_tokens_per_s", 64.0);
    if (!(aging > 0)) return make_error("sjf: aging_tokens_per_s must be > 0, or long requests could starve");
    return std::unique_ptr<scheduling_policy>(new sjf(aging));
  });
}

}  // namespace troupe::actors::policies

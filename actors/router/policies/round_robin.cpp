// `round_robin`: each request to the next replica that can take one, in the order of replica
// ids, wrapping around. It looks at no load: the baseline the other policies are measured
// against. A replica that joins takes its turn when the cycle reaches its id; one that leaves
// is skipped. No options.
#include "actors/router/policy.hpp"

namespace troupe::actors {
namespace {

class round_robin final : public routing_policy {
 public:
  std::string name() const override { return "round_robin"; }
  std::optional<size_t> pick(const route_request&, const std::vector<replica_view>& replicas) override {
    // The smallest id after the last one picked, else the smallest id (the cycle wraps). By id,
    // not by index: the candidates change as replicas join, drain and die.
    std::optional<size_t> after, first;
    for (size_t i = 0; i < replicas.size(); ++i) {
      const uint64_t id = replicas[i].id;
      if (!first || id < replicas[*first].id) first = i;
      if (started_ && id > last_ && (!after || id < replicas[*after].id)) after = i;
    }
    const size_t chosen = after ? *after : *first;
    last_ = replicas[chosen].id;
    started_ = true;
    return chosen;
  }

 private:
  uint64_t last_ = 0;
  bool started_ = false;
};

}  // namespace

void add_round_robin(named_registry<routing_policy_factory>& r) {
  (void)r.add("round_robin", [](const routing_options& o) -> result<std::unique_ptr<routing_policy>> {
    if (auto s = check_routing_keys("round_robin", o, {}); !s) return make_error(s.error());
    return std::unique_ptr<routing_policy>(new round_robin());
  });
}

}  // namespace troupe::actors

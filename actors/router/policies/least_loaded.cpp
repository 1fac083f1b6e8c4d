// `least_loaded`: the replica with the least work ahead of a new request (load_order.hpp): the
// fewest tokens placed there and not yet finished, then the fewest sequences it reported waiting
// or running, then the most free KV blocks; ties by replica id. No options.
#include "actors/router/policies/load_order.hpp"
#include "actors/router/policy.hpp"

namespace troupe::actors {
namespace {

class least_loaded final : public routing_policy {
 public:
  std::string name() const override { return "least_loaded"; }
  std::optional<size_t> pick(const route_request&, const std::vector<replica_view>& replicas) override {
    return detail::least_loaded_index(replicas);
  }
};

}  // namespace

void add_least_loaded(named_registry<routing_policy_factory>& r) {
  (void)r.add("least_loaded", [](const routing_options& o) -> result<std::unique_ptr<routing_policy>> {
    if (auto s = check_routing_keys("least_loaded", o, {}); !s) return make_error(s.error());
    return std::unique_ptr<routing_policy>(new least_loaded());
  });
}

}  // namespace troupe::actors

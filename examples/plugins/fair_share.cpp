// Shows: a scheduling policy built as a plugin and chosen by name in the config. It shares the
// engine between tenants by weight (in the spirit of the Virtual Token Counter of Sheng et al.,
// "Fairness in Serving Large Language Models", OSDI 2024): each tenant has a counter of the
// tokens the engine computed for it (prompt and generated), divided by its weight, and the
// tenant with the lowest counter goes first; within a tenant, requests keep their arrival order.
// A tenant of weight 3 so gets three times the tokens of a tenant of weight 1 while both wait.
// A tenant not served yet goes first, once; its counter then starts at the lowest counter. So
// that a tenant cannot save up credit while idle, no counter lags the busiest tenant of the last
// step by more than max_lag_tokens.
//
//   plugins = ["build/examples/libtroupe_fair_share.so"]
//   [scheduler]
//   policy = "fair_share"
//   [scheduler.policy_options]
//   weight_alice = 3.0        # weight_<tenant>: that tenant's weight (> 0)
//   default_weight = 1.0      # tenants not named
//   max_lag_tokens = 4096.0   # credit a waiting tenant may hold, in weighted tokens
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "actors/plugins/plugin_api.hpp"

namespace {

using namespace troupe;
using namespace troupe::actors;

struct fair_share_options {
  std::map<std::string, double> weights;  // by tenant
  double default_weight = 1.0;
  double max_lag = 4096.0;
};

class fair_share final : public scheduling_policy {
 public:
  explicit fair_share(fair_share_options o) : o_(std::move(o)) {}

  std::string name() const override { return "fair_share"; }

  // Lowest weighted counter first, then arrival: a strict weak order, since counters change
  // only between sorts (in on_step).
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    if (a.tenant != b.tenant) {
      const double ca = counter(a.tenant), cb = counter(b.tenant);
      if (ca != cb) return ca < cb;
    }
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }

  void on_step(const step_feedback& f) override {
    if (f.tenant_tokens.empty()) return;
    double leader = -std::numeric_limits<double>::infinity();
    for (const auto& [tenant, tokens] : f.tenant_tokens) {
      auto it = counters_.find(tenant);
      if (it == counters_.end()) it = counters_.emplace(tenant, floor_).first;
      it->second += tokens / weight(tenant);
      leader = std::max(leader, it->second);
    }
    floor_ = std::numeric_limits<double>::infinity();
    for (auto& [tenant, c] : counters_) {
      c = std::max(c, leader - o_.max_lag);
      floor_ = std::min(floor_, c);
    }
  }

 private:
  double weight(const std::string& tenant) const {
    auto it = o_.weights.find(tenant);
    return it == o_.weights.end() ? o_.default_weight : it->second;
  }
  double counter(const std::string& tenant) const {
    auto it = counters_.find(tenant);
    return it == counters_.end() ? -std::numeric_limits<double>::infinity() : it->second;
  }

  fair_share_options o_;
  std::map<std::string, double> counters_;  // weighted tokens served, by tenant
  double floor_ = 0;                        // the lowest counter: where a new tenant's starts
};

result<std::unique_ptr<scheduling_policy>> make_fair_share(const policy_options& options) {
  fair_share_options o;
  for (const auto& [key, value] : options.values) {
    if (key == "default_weight") {
      o.default_weight = value;
    } else if (key == "max_lag_tokens") {
      o.max_lag = value;
    } else if (key.rfind("weight_", 0) == 0 && key.size() > 7) {
      o.weights[key.substr(7)] = value;
    } else {
      return make_error("policy 'fair_share' has no option '" + key +
                        "' (it has: weight_<tenant>, default_weight, max_lag_tokens)");
    }
    if (!(value > 0)) return make_error("policy 'fair_share': option '" + key + "' must be > 0");
  }
  return std::unique_ptr<scheduling_policy>(new fair_share(std::move(o)));
}

}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_scheduling_policy("fair_share", make_fair_share);
  return 0;
}

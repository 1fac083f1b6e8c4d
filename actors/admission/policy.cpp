#include "actors/admission/policy.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "actors/request.hpp"

namespace troupe::actors {

namespace {

// "token_bucket": two buckets per tenant, requests and tokens (prompt + max_tokens), each
// refilled at its rate up to its burst. Both are checked before either is taken from; a refusal
// says when to retry. A request larger than the token burst can never pass and says so.
class token_bucket final : public admission_policy {
 public:
  explicit token_bucket(const admission_config& cfg) { reconfigure(cfg); }

  std::string name() const override { return "token_bucket"; }

  bool reconfigure(const admission_config& cfg) override {
    default_ = cfg.default_tenant;
    tenants_limits_ = cfg.tenants;
    return true;  // the buckets keep their levels under the new limits
  }

  admission_verdict admit(const admission_ask& a) override {
    const auto& lim = limits_of(a.tenant);
    auto& t = tenants_[a.tenant];
    const double cost = a.cost;
    if (lim.tokens_per_s > 0) {
      const double burst = lim.token_burst > 0 ? lim.token_burst : std::max(lim.tokens_per_s, cost);
      if (cost > burst)
        return admission_verdict::refuse(errc::rate_limited, "the request (" + std::to_string(static_cast<int64_t>(cost)) +
                                                                 " tokens with max_tokens) exceeds tenant '" + a.tenant +
                                                                 "''s burst of " +
                                                                 std::to_string(static_cast<int64_t>(burst)) + " tokens");
    }
    // Check both buckets before taking from either.
    bucket req_probe = t.requests, tok_probe = t.tokens;
    const double req_burst = lim.request_burst > 0 ? lim.request_burst : std::max(1.0, lim.requests_per_s);
    const double tok_burst = lim.token_burst > 0 ? lim.token_burst : std::max(lim.tokens_per_s, cost);
    const int64_t wait_req = take(req_probe, lim.requests_per_s, req_burst, 1.0, a.now_us);
    const int64_t wait_tok = take(tok_probe, lim.tokens_per_s, tok_burst, cost, a.now_us);
    if (wait_req > 0 || wait_tok > 0)
      return admission_verdict::refuse(errc::rate_limited,
                                       "tenant '" + a.tenant + "' is over its " + (wait_req > 0 ? "request" : "token") +
                                           " rate; retry later",
                                       std::max(wait_req, wait_tok));
    t.requests = req_probe;
    t.tokens = tok_probe;
    return admission_verdict::admit();
  }

 private:
  struct bucket {
    double level = 0;
    int64_t updated_us = 0;
    bool primed = false;
  };
  struct tenant {
    bucket requests, tokens;
  };

  const tenant_limits& limits_of(const std::string& name) const {
    auto it = tenants_limits_.find(name);
    return it == tenants_limits_.end() ? default_ : it->second;
  }

  // Refills, then takes `cost` if there is enough; otherwise the wait in ms until there is.
  static int64_t take(bucket& b, double rate, double burst, double cost, int64_t now_us) {
    if (rate <= 0) return 0;
    if (!b.primed) {
      b.level = burst;
      b.updated_us = now_us;
      b.primed = true;
    }
    b.level = std::min(burst, b.level + rate * static_cast<double>(now_us - b.updated_us) * 1e-6);
    b.updated_us = now_us;
    if (b.level >= cost) {
      b.level -= cost;
      return 0;
    }
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil((cost - b.level) / rate * 1000.0)));
  }

  tenant_limits default_;
  std::map<std::string, tenant_limits> tenants_limits_;
  std::unordered_map<std::string, tenant> tenants_;
};

void add_token_bucket(named_registry<admission_policy_factory>& r) {
  r.add("token_bucket", [](const admission_config& c) -> result<std::unique_ptr<admission_policy>> {
    option_reader rd("admission policy 'token_bucket'", c.policy_options);
    if (auto s = rd.finish(); !s) return make_error(s.error() + "; its limits are [admission.default_tenant] and [admission.tenants]");
    return std::unique_ptr<admission_policy>(new token_bucket(c));
  });
}

}  // namespace

named_registry<admission_policy_factory>& admission_policy_registry() {
  static auto* r = new named_registry<admission_policy_factory>("admission policy", {add_token_bucket});
  return *r;
}

result<std::unique_ptr<admission_policy>> make_admission_policy(const admission_config& cfg,
                                                                const named_registry<admission_policy_factory>& registry) {
  auto f = registry.find(cfg.policy);
  if (!f) return make_error(f.error());
  auto p = f.value()(cfg);
  if (!p) return make_error(p.error());
  if (!p.value()) return make_error("admission policy '" + cfg.policy + "' made nothing");
  return p;
}

}  // namespace troupe::actors

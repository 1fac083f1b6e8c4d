// Admission policies: what admission_state asks its policy and tells it (tenant, cost, usage at
// close), refusals passed on with their code and retry hint, hot reconfiguration keeping or
// replacing the policy, and the registry (token_bucket built in, unknown names listed).
#include "actors/admission/policy.hpp"

#include <gtest/gtest.h>

#include "actors/admission/admission_state.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

admission_config acfg() {
  admission_config c;
  c.model_name = "m";
  c.n_ctx = 64;
  c.n_vocab = 320;
  c.max_tokens_cap = 32;
  c.default_max_tokens = 16;
  c.max_pending = 100;
  return c;
}

request_spec spec(const std::string& prompt, int32_t max_tokens, const std::string& tenant = {}) {
  request_spec s;
  s.prompt = prompt;
  s.max_tokens = max_tokens;
  s.tenant = tenant;
  return s;
}

// Records what it is told; refuses tenant "blocked".
struct journal {
  std::vector<admission_ask> asks;
  std::vector<admission_usage> closed;
  int reconfigured = 0;
};

class recording_policy final : public admission_policy {
 public:
  explicit recording_policy(std::shared_ptr<journal> j) : j_(std::move(j)) {}
  std::string name() const override { return "recording"; }
  admission_verdict admit(const admission_ask& a) override {
    j_->asks.push_back(a);
    if (a.tenant == "blocked") return admission_verdict::refuse(errc::rate_limited, "blocked today", 1234);
    return admission_verdict::admit();
  }
  void on_closed(const admission_usage& u) override { j_->closed.push_back(u); }
  bool reconfigure(const admission_config&) override {
    ++j_->reconfigured;
    return true;
  }

 private:
  std::shared_ptr<journal> j_;
};

}  // namespace

TEST(admission_policy, sees_tenant_and_cost_on_admit_and_usage_on_close) {
  auto j = std::make_shared<journal>();
  admission_state a(acfg(), make_byte_codec(), std::make_unique<recording_policy>(j));
  auto d = a.admit(spec("hello", 10, "alice"), 100);
  ASSERT_TRUE(d.ok) << d.error.message;
  EXPECT_EQ(d.open.tenant, "alice");
  ASSERT_EQ(j->asks.size(), 1u);
  EXPECT_EQ(j->asks[0].id, d.request.id);
  EXPECT_EQ(j->asks[0].tenant, "alice");
  EXPECT_EQ(j->asks[0].prompt_tokens, 5);
  EXPECT_EQ(j->asks[0].max_tokens, 10);
  EXPECT_DOUBLE_EQ(j->asks[0].cost, 15.0);
  a.on_closed(d.request.id, 900, 7, finish::length);
  ASSERT_EQ(j->closed.size(), 1u);
  EXPECT_EQ(j->closed[0].tenant, "alice");
  EXPECT_EQ(j->closed[0].prompt_tokens, 5);
  EXPECT_EQ(j->closed[0].completion_tokens, 7);
  EXPECT_EQ(j->closed[0].finish_reason, finish::length);
  EXPECT_EQ(j->closed[0].admitted_us, 100);
  a.on_closed(d.request.id, 950, 7, finish::length);  // once only
  EXPECT_EQ(j->closed.size(), 1u);
  EXPECT_EQ(a.stats().pending, 0);
}

TEST(admission_policy, a_refusal_is_passed_on_and_invalid_requests_never_reach_the_policy) {
  auto j = std::make_shared<journal>();
  admission_state a(acfg(), make_byte_codec(), std::make_unique<recording_policy>(j));
  auto d = a.admit(spec("x", 4, "blocked"), 0);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.code, errc::rate_limited);
  EXPECT_EQ(d.error.message, "blocked today");
  EXPECT_EQ(d.error.retry_after_ms, 1234);
  EXPECT_EQ(a.stats().rate_limited, 1);
  EXPECT_FALSE(a.admit(spec("x", 999), 0).ok);  // over max_tokens_cap
  EXPECT_EQ(j->asks.size(), 1u);
  // The refused request used no id.
  EXPECT_EQ(a.admit(spec("x", 4), 0).request.id, 1u);
}

TEST(admission_policy, reconfigure_keeps_the_policy_when_name_and_options_stay) {
  auto j = std::make_shared<journal>();
  auto c = acfg();
  admission_state a(c, make_byte_codec(), std::make_unique<recording_policy>(j));
  c.max_pending = 7;
  ASSERT_TRUE(a.reconfigure(c).ok());
  EXPECT_EQ(j->reconfigured, 1);
  EXPECT_EQ(a.config().max_pending, 7);
  EXPECT_EQ(a.policy()->name(), "recording");
}

TEST(admission_policy, token_bucket_keeps_its_buckets_across_new_limits) {
  auto c = acfg();
  c.tenants["t"] = tenant_limits{1, 1, 0, 0};  // one request a second
  admission_state a(c, make_byte_codec());
  EXPECT_EQ(a.policy()->name(), "token_bucket");
  EXPECT_TRUE(a.admit(spec("x", 1, "t"), 0).ok);
  c.max_pending = 50;
  ASSERT_TRUE(a.reconfigure(c).ok());
  EXPECT_FALSE(a.admit(spec("x", 1, "t"), 0).ok);  // the bucket is still empty
}

TEST(admission_policy, a_new_policy_name_swaps_the_policy_and_an_unknown_one_keeps_it) {
  auto c = acfg();
  c.tenants["t"] = tenant_limits{1, 1, 0, 0};
  admission_state a(c, make_byte_codec());
  auto bad = c;
  bad.policy = "no_such_policy";
  auto s = a.reconfigure(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("unknown admission policy 'no_such_policy'"), std::string::npos) << s.error();
  EXPECT_NE(s.error().find("token_bucket"), std::string::npos) << s.error();
  EXPECT_EQ(a.config().policy, "token_bucket");
  EXPECT_EQ(a.policy()->name(), "token_bucket");

  named_registry<admission_policy_factory> reg("admission policy");
  auto j = std::make_shared<journal>();
  ASSERT_TRUE(reg.add("recording", [j](const admission_config&) -> result<std::unique_ptr<admission_policy>> {
    return std::unique_ptr<admission_policy>(new recording_policy(j));
  }));
  EXPECT_FALSE(reg.add("recording", {}).ok());  // a duplicate name
  auto made = make_admission_policy([] {
    auto x = acfg();
    x.policy = "recording";
    return x;
  }(), reg);
  ASSERT_TRUE(made.ok()) << made.error();
  EXPECT_EQ(made.value()->name(), "recording");
}

TEST(admission_policy, token_bucket_takes_no_options) {
  auto c = acfg();
  c.policy_options["rate"] = 3.0;
  auto p = make_admission_policy(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("no option 'rate'"), std::string::npos) << p.error();
  // Such a state refuses every request with the reason instead of admitting unchecked.
  admission_state a(c, make_byte_codec());
  auto d = a.admit(spec("x", 1), 0);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.error.code, errc::internal);
}

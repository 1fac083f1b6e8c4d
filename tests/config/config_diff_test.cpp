// config_diff classifies each changed key as hot or restart; to_toml round-trips.
#include "config/config_diff.hpp"

#include <gtest/gtest.h>

#include "config/config_loader.hpp"

namespace troupe::config {
namespace {

const config_change* find(const std::vector<config_change>& d, const std::string& key) {
  for (const auto& c : d)
    if (c.key == key) return &c;
  return nullptr;
}

TEST(ConfigDiff, EqualConfigsHaveNoChanges) {
  EXPECT_TRUE(config_diff(troupe_config{}, troupe_config{}).empty());
}

TEST(ConfigDiff, HotChangesAreTheSwappableOnes) {
  troupe_config a, b;
  b.admission.policy = "fair_share";
  b.admission.max_pending = 10;
  b.admission.tenants["alice"].tokens_per_s = 100;
  b.scheduler.policy = "sjf";
  b.scheduler.policy_options["aging_tokens_per_s"] = 8;
  b.scheduler.max_num_seqs = 4;
  b.scheduler.max_batched_tokens = 64;
  b.cache.policy = "exact";
  b.cache.threshold = 0.8f;
  b.cache.ttl_s = 60;
  b.streamer.filters.push_back({"redact", {}});
  b.logging.level = "debug";
  const auto d = config_diff(a, b);
  for (const char* k : {"admission.policy", "admission.max_pending", "admission.tenants.alice.tokens_per_s",
                        "scheduler.policy", "scheduler.policy_options.aging_tokens_per_s", "scheduler.max_num_seqs",
                        "scheduler.max_batched_tokens", "cache.policy", "cache.threshold", "cache.ttl_s",
                        "streamer.filters", "logging.level"}) {
    const auto* c = find(d, k);
    ASSERT_NE(c, nullptr) << k;
    EXPECT_EQ(c->reload, reload_kind::hot) << k;
  }
  EXPECT_EQ(d.size(), 15u);  // alice's four limits are four keys
  EXPECT_FALSE(needs_restart(d));
  const auto* t = find(d, "cache.threshold");
  EXPECT_EQ(t->old_value, "0.9");
  EXPECT_EQ(t->new_value, "0.8");
  const auto* alice = find(d, "admission.tenants.alice.tokens_per_s");
  EXPECT_EQ(alice->old_value, "");  // a new tenant
  EXPECT_EQ(alice->new_value, "100.0");
}

TEST(ConfigDiff, RestartChangesAreReportedAsSuch) {
  troupe_config a, b;
  b.model.path = "models/other.gguf";
  b.server.port = 9000;
  b.server.host = "0.0.0.0";
  b.kv.memory_mib = 1024;
  b.cache.embedder = "hashed_ngrams";
  b.plugins.push_back("libx.so");
  const auto d = config_diff(a, b);
  ASSERT_EQ(d.size(), 6u);
  for (const auto& c : d) EXPECT_EQ(c.reload, reload_kind::restart) << c.key;
  EXPECT_TRUE(needs_restart(d));
  EXPECT_EQ(find(d, "kv.memory_mib")->new_value, "1024");
  EXPECT_EQ(reload_of("admission.tenants.bob.token_burst"), reload_kind::hot);
  EXPECT_EQ(reload_of("auth.api_keys[0].key"), reload_kind::restart);
  EXPECT_EQ(reload_of("no.such.key"), reload_kind::restart);
}

TEST(ConfigDiff, SecretsChangeWithoutShowingTheirValues) {
  troupe_config a, b;
  b.auth.admin_token = "s3cret";
  b.auth.api_keys.push_back({"sk-live", "t"});
  const auto d = config_diff(a, b);
  ASSERT_EQ(d.size(), 2u);
  for (const auto& c : d) {
    EXPECT_EQ(c.new_value.find("s3cret"), std::string::npos);
    EXPECT_EQ(c.new_value.find("sk-live"), std::string::npos);
  }
  troupe_config c = b;
  c.auth.api_keys[0].key = "sk-other";  // only the (redacted) key differs
  ASSERT_EQ(config_diff(b, c).size(), 1u);
  EXPECT_EQ(config_diff(b, c)[0].key, "auth.api_keys");
}

TEST(ConfigToml, RoundTripsAConfigWithEveryKindOfValue) {
  troupe_config c;
  c.plugins = {"a.so", "b.so"};
  c.server.host = "::1";
  c.server.port = 0;
  c.model.name = "smol \"quoted\"";
  c.kv.f32 = true;
  c.scheduler.policy = "sjf";
  c.scheduler.policy_options["aging_tokens_per_s"] = 12.5;
  c.admission.default_tenant.requests_per_s = 3;
  c.admission.tenants["team-a"].token_burst = 5000;
  c.admission.tenants["b"].requests_per_s = 0.25;
  c.cache.threshold = 0.87f;
  c.cache.policy = "exact";
  c.streamer.filters.push_back({"redact", {{"words", std::vector<std::string>{"x", "y"}}, {"on", true},
                                           {"n", int64_t{3}}, {"f", 0.5}, {"s", std::string("z")}}});
  c.streamer.filters.push_back({"stop_on", {}});
  c.auth.api_keys = {{"k1", "team-a"}, {"k2", ""}};
  c.auth.admin_token = "admin";
  c.logging.level = "warn";
  c.supervisor.max_restarts = 0;

  config_registries r = config_registries::global();
  r.filters = [] { return std::vector<std::string>{"redact", "stop_on"}; };
  r.filter_options = {};  // made-up options: this is about TOML values, not the filters
  const std::string text = to_toml(c);
  auto back = parse_config(text, "to_toml", {}, r);
  ASSERT_TRUE(back.ok()) << back.error() << "\n" << text;
  const auto d = config_diff(c, back.value());
  for (const auto& x : d) ADD_FAILURE() << x.key << ": " << x.old_value << " -> " << x.new_value;
  EXPECT_EQ(to_toml(back.value()), text);
  EXPECT_EQ(back->auth.api_keys, c.auth.api_keys);
  EXPECT_EQ(back->streamer.filters, c.streamer.filters);
  EXPECT_NE(text.find("threshold = 0.87\n"), std::string::npos) << text;

  // The defaults round-trip too.
  auto defaults = parse_config(to_toml(troupe_config{}), "to_toml");
  ASSERT_TRUE(defaults.ok()) << defaults.error();
  EXPECT_TRUE(config_diff(troupe_config{}, defaults.value()).empty());
}

TEST(ConfigToml, RedactsSecretsForTheAdminEndpoint) {
  troupe_config c;
  c.auth.api_keys = {{"sk-live-123", "t"}};
  c.auth.admin_token = "admin-456";
  const std::string text = to_toml(c, secrets::redact);
  EXPECT_EQ(text.find("sk-live-123"), std::string::npos);
  EXPECT_EQ(text.find("admin-456"), std::string::npos);
  EXPECT_NE(text.find("<redacted>"), std::string::npos);
  EXPECT_NE(text.find("tenant = \"t\""), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::config

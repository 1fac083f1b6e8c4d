// config_diff classifies each changed key as hot or restart; to_toml round-trips.
#include "config/config_diff.hpp"

#include <gtest/gtest.h>

#include <set>

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
  b.pipeline.admission.policy = "fair_share";
  b.pipeline.admission.max_pending = 10;
  b.pipeline.admission.tenants["alice"].tokens_per_s = 100;
  b.pipeline.scheduler.policy = "sjf";
  b.pipeline.scheduler.policy_opts.values["aging_tokens_per_s"] = 8;
  b.pipeline.scheduler.max_num_seqs = 4;
  b.pipeline.scheduler.max_batched_tokens = 64;
  b.pipeline.cache.policy = "exact";
  b.pipeline.cache.semantic.threshold = 0.8f;
  b.pipeline.cache.semantic.ttl_s = 60;
  b.pipeline.streamer.filters.push_back({"redact", {}});
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

// What a reload replaces is decided here, from the diff: each hot key names its stage.
TEST(ConfigDiff, HotChangesNameTheStagesToReplace) {
  troupe_config a;
  EXPECT_TRUE(stages_to_replace(config_diff(a, a)).empty());  // an unchanged config replaces nothing
  troupe_config b = a;
  b.pipeline.scheduler.max_num_seqs = 4;
  EXPECT_EQ(stages_to_replace(config_diff(a, b)), std::set<std::string>{"scheduler"});
  b.pipeline.admission.tenants["alice"].tokens_per_s = 100;
  b.pipeline.cache.semantic.lexical_guards = false;
  b.pipeline.streamer.filters.push_back({"redact", {}});
  EXPECT_EQ(stages_to_replace(config_diff(a, b)),
            (std::set<std::string>{"admission", "cache", "scheduler", "streamer"}));
  // Hot keys no stage holds, and restart keys, replace nothing.
  troupe_config c = a;
  c.logging.level = "debug";
  c.pipeline.cache.semantic.path = "elsewhere";
  c.pipeline.streamer.buffer_tokens = 1;
  EXPECT_TRUE(stages_to_replace(config_diff(a, c)).empty());
  EXPECT_EQ(stage_of("admission.tenants.bob.token_burst"), "admission");
  EXPECT_EQ(stage_of("admission.max_prompt_tokens"), "admission");
  EXPECT_EQ(stage_of("streamer.filters"), "streamer");
  EXPECT_EQ(stage_of("cache.path"), "");
}

TEST(ConfigDiff, RestartChangesAreReportedAsSuch) {
  troupe_config a, b;
  b.model.path = "models/other.gguf";
  b.server.port = 9000;
  b.server.host = "0.0.0.0";
  b.backend.kv_bytes = int64_t{1024} << 20;  // kv.memory_mib = 1024
  b.pipeline.cache.semantic.embedder = "hashed_ngrams";
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
  b.server.admin_token = "s3cret";
  b.server.api_keys.push_back("sk-live");
  b.server.api_key_tenants.push_back("t");
  const auto d = config_diff(a, b);
  ASSERT_EQ(d.size(), 2u);
  for (const auto& c : d) {
    EXPECT_EQ(c.new_value.find("s3cret"), std::string::npos);
    EXPECT_EQ(c.new_value.find("sk-live"), std::string::npos);
  }
  troupe_config c = b;
  c.server.api_keys[0] = "sk-other";  // only the (redacted) key differs
  ASSERT_EQ(config_diff(b, c).size(), 1u);
  EXPECT_EQ(config_diff(b, c)[0].key, "auth.api_keys");
}

TEST(ConfigToml, RoundTripsAConfigWithEveryKindOfValue) {
  troupe_config c;
  c.plugins = {"a.so", "b.so"};
  c.server.host = "::1";
  c.server.port = 0;
  c.model.name = "smol \"quoted\"";
  c.backend.kv_f32 = true;
  c.pipeline.scheduler.policy = "sjf";
  c.pipeline.scheduler.policy_opts.values["aging_tokens_per_s"] = 12.5;
  c.pipeline.admission.default_tenant.requests_per_s = 3;
  c.pipeline.admission.tenants["team-a"].token_burst = 5000;
  c.pipeline.admission.tenants["b"].requests_per_s = 0.25;
  c.pipeline.cache.semantic.threshold = 0.87f;
  c.pipeline.cache.policy = "exact";
  c.pipeline.streamer.filters.push_back({"redact", {{"words", std::vector<std::string>{"x", "y"}}, {"on", true},
                                           {"n", int64_t{3}}, {"f", 0.5}, {"s", std::string("z")}}});
  c.pipeline.streamer.filters.push_back({"stop_on", {}});
  c.server.api_keys = {"k1", "k2"};
  c.server.api_key_tenants = {"team-a", ""};
  c.server.admin_token = "admin";
  c.logging.level = "warn";
  c.pipeline.max_restarts = 0;

  config_registries r = config_registries::global();
  r.filters = [] { return std::vector<std::string>{"redact", "stop_on"}; };
  r.filter_options = {};  // made-up options: this is about TOML values, not the filters
  const std::string text = to_toml(c);
  auto back = parse_config(text, "to_toml", {}, r);
  ASSERT_TRUE(back.ok()) << back.error() << "\n" << text;
  const auto d = config_diff(c, back.value());
  for (const auto& x : d) ADD_FAILURE() << x.key << ": " << x.old_value << " -> " << x.new_value;
  EXPECT_EQ(to_toml(back.value()), text);
  EXPECT_EQ(back->server.api_keys, c.server.api_keys);
  EXPECT_EQ(back->server.api_key_tenants, c.server.api_key_tenants);
  EXPECT_EQ(back->pipeline.streamer.filters, c.pipeline.streamer.filters);
  EXPECT_NE(text.find("threshold = 0.87\n"), std::string::npos) << text;

  // The defaults round-trip too.
  auto defaults = parse_config(to_toml(troupe_config{}), "to_toml");
  ASSERT_TRUE(defaults.ok()) << defaults.error();
  EXPECT_TRUE(config_diff(troupe_config{}, defaults.value()).empty());
}

TEST(ConfigToml, RedactsSecretsForTheAdminEndpoint) {
  troupe_config c;
  c.server.api_keys = {"sk-live-123"};
  c.server.api_key_tenants = {"t"};
  c.server.admin_token = "admin-456";
  const std::string text = to_toml(c, secrets::redact);
  EXPECT_EQ(text.find("sk-live-123"), std::string::npos);
  EXPECT_EQ(text.find("admin-456"), std::string::npos);
  EXPECT_NE(text.find("<redacted>"), std::string::npos);
  EXPECT_NE(text.find("tenant = \"t\""), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::config

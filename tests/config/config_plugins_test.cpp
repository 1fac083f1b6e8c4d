// Plugins, output filters and the admission policy in the config: the two-pass read that loads
// plugins before names are checked (and stops on a plugin that fails, naming it), filter and
// admission options checked by their factories with file/line/key, the keys' way into the
// pipeline's config, and printing them back.
#include "config/config_plugins.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "actors/supervisor/pipeline.hpp"
#include "config/troupe_config.hpp"
#include "tests/support/temp_dir.hpp"

namespace troupe::config {
namespace {

std::string broken(const std::string& name) { return std::string(TROUPE_TEST_PLUGIN_DIR) + "/libtest_plugin_" + name + ".so"; }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ConfigPlugins, APluginThatFailsToLoadStopsTheReadNamingFileAndLibrary) {
  test::temp_dir dir("config-plugins");
  const std::string path = dir.str("troupe.toml");
  std::ofstream(path) << "plugins = [\"" << broken("bad_abi") << "\"]\n";
  auto c = resolve_config_with_plugins(path, "");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.error(), path + ": plugins: plugin " + broken("bad_abi") + " was built for ABI ")) << c.error();

  std::ofstream(path) << "plugins = [\"" << dir.str("nothing-here.so") << "\"]\n";
  auto missing = resolve_config_with_plugins(path, "");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(has(missing.error(), "cannot load it")) << missing.error();
}

TEST(ConfigPlugins, FilterAndAdmissionOptionsAreCheckedByTheirFactories) {
  auto c = parse_config(R"(
[admission.policy_options]
burst = 3
[[streamer.filters]]
name = "redact"
options = { words = ["a"], replace = "x" }
)",
                        "t.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.error(), "t.toml:3:9: admission.policy_options.burst: admission policy 'token_bucket' has no option 'burst'"))
      << c.error();
  EXPECT_TRUE(has(c.error(), "t.toml:6:11: streamer.filters[0].options: stream filter 'redact' has no option 'replace'"))
      << c.error();
  auto unknown = parse_config("[admission]\npolicy = \"quota\"\n", "t.toml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(has(unknown.error(), "unknown admission policy 'quota' (known: ")) << unknown.error();
  EXPECT_TRUE(has(unknown.error(), "token_bucket")) << unknown.error();
}

TEST(ConfigPlugins, FiltersAndTheAdmissionPolicyReachThePipelineAndPrintBack) {
  auto c = parse_config(R"(
[admission]
policy = "token_bucket"
[[streamer.filters]]
name = "redact"
options = { words = ["secret", "key"], replacement = "***", whole_words = false }
[[streamer.filters]]
name = "stop_on"
options = { phrases = ["BEGIN PRIVATE KEY"] }
)",
                        "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  const actors::pipeline_config& p = c->pipeline;
  ASSERT_EQ(p.streamer.filters.size(), 2u);
  EXPECT_EQ(p.streamer.filters[0].name, "redact");
  EXPECT_EQ(std::get<std::string>(p.streamer.filters[0].options.at("replacement")), "***");
  EXPECT_EQ(std::get<bool>(p.streamer.filters[0].options.at("whole_words")), false);
  EXPECT_EQ(p.streamer.filters[1].name, "stop_on");
  EXPECT_EQ(p.admission.policy, "token_bucket");
  // Printed and read back: the same config.
  auto again = parse_config(to_toml(*c), "printed");
  ASSERT_TRUE(again.ok()) << again.error() << "\n" << to_toml(*c);
  EXPECT_TRUE(again->pipeline.streamer.filters == c->pipeline.streamer.filters);
  EXPECT_TRUE(again->pipeline.admission.policy_options == c->pipeline.admission.policy_options);
}

TEST(ConfigPlugins, AdmissionPolicyOptionsKeepTheirTypes) {
  // Names are not checked here (a plugin would register the policy).
  config_registries r = config_registries::unchecked();
  auto c = parse_config(R"(
[admission]
policy = "daily_quota"
[admission.policy_options]
path = "data/q.tsv"
daily_tokens = 100
ratio = 0.5
strict = true
tenants = ["a", "b"]
)",
                        "t.toml", {}, r);
  ASSERT_TRUE(c.ok()) << c.error();
  const auto& o = c->pipeline.admission.policy_options;
  EXPECT_EQ(std::get<std::string>(o.at("path")), "data/q.tsv");
  EXPECT_EQ(std::get<int64_t>(o.at("daily_tokens")), 100);
  EXPECT_EQ(std::get<double>(o.at("ratio")), 0.5);
  EXPECT_EQ(std::get<bool>(o.at("strict")), true);
  EXPECT_EQ(std::get<std::vector<std::string>>(o.at("tenants")).size(), 2u);
  auto again = parse_config(to_toml(*c), "printed", {}, r);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_TRUE(again->pipeline.admission.policy_options == o);
}

}  // namespace
}  // namespace troupe::config

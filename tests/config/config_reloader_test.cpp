// config_reloader: a reload applies the hot keys and reports the restart-only ones; what it hands
// to the appliers keeps every restart-only key at its running value.
#include "config/config_reloader.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "config/config_diff.hpp"

namespace troupe::config {
namespace {

troupe_config running_config() {
  troupe_config c;
  c.pipeline.cache.enabled = false;
  c.pipeline.cache.semantic.path = "data/cache-a";
  c.pipeline.cache.semantic.embedder = "minilm";
  c.server.port = 8080;
  return c;
}

// The cache turned on together with a new path and embedder: the cache may open now, but at the
// path and with the embedder the process started with (a store built by another embedder would
// be compared against the wrong vectors).
TEST(ConfigReloader, AppliesHotKeysWithTheRestartOnlyOnesAtTheirRunningValues) {
  const troupe_config running = running_config();
  config_reloader reloader(running, "", "", {});
  troupe_config next = running;
  next.pipeline.cache.enabled = true;                       // hot
  next.pipeline.cache.semantic.threshold = 0.8f;            // hot
  next.pipeline.cache.semantic.path = "data/cache-b";       // restart
  next.pipeline.cache.semantic.embedder = "hashed_ngrams";  // restart
  next.server.port = 9999;                                  // restart
  troupe_config applied;
  std::set<std::string> stages;
  int applies = 0;
  const auto r = reloader.reload_from(next, [&](const troupe_config& c, const std::set<std::string>& s)
                                                -> result<std::vector<std::string>> {
    applied = c;
    stages = s;
    ++applies;
    return std::vector<std::string>{"cache"};
  });
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(applies, 1);
  EXPECT_TRUE(applied.pipeline.cache.enabled);
  EXPECT_FLOAT_EQ(applied.pipeline.cache.semantic.threshold, 0.8f);
  EXPECT_EQ(applied.pipeline.cache.semantic.path, "data/cache-a");
  EXPECT_EQ(applied.pipeline.cache.semantic.embedder, "minilm");
  EXPECT_EQ(applied.server.port, 8080);
  EXPECT_EQ(stages, std::set<std::string>{"cache"});  // from the diff: only the cache's keys changed
  std::vector<std::string> restart;
  for (const auto& c : r.restart_needed) restart.push_back(c.key);
  EXPECT_EQ(restart, (std::vector<std::string>{"server.port", "cache.path", "cache.embedder"}));
  EXPECT_EQ(r.applied.size(), 2u);
}

// An editor that swaps the file for a directory must not reset every hot key to its default.
TEST(ConfigReloader, ADirectoryInPlaceOfTheFileIsRefusedByName) {
  const std::string dir = ::testing::TempDir() + "/troupe_config_reloader_dir.toml";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  config_reloader reloader(running_config(), dir, "", {});
  int applies = 0;
  const auto r = reloader.reload([&](const troupe_config&, const std::set<std::string>&) -> result<std::vector<std::string>> {
    ++applies;
    return std::vector<std::string>{};
  });
  ::rmdir(dir.c_str());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(applies, 0);
  EXPECT_NE(r.error.find("cannot read config file '" + dir + "': Is a directory"), std::string::npos) << r.error;
  EXPECT_EQ(reloader.version(), 1);
}

// A reload of a file holding `text` (removed afterwards), with an apply that only counts.
struct refused_reload {
  reload_result result;
  int applies = 0;
  std::string path;
};
refused_reload reload_text(const std::string& name, const std::string& text) {
  refused_reload out;
  out.path = ::testing::TempDir() + "/" + name;
  {
    std::ofstream f(out.path);
    f << text;
  }
  config_reloader reloader(running_config(), out.path, "", {});
  out.result = reloader.reload([&](const troupe_config&, const std::set<std::string>&) -> result<std::vector<std::string>> {
    ++out.applies;
    return std::vector<std::string>{};
  });
  std::remove(out.path.c_str());
  return out;
}

// An empty file (an editor's save caught half-way) would turn every hot key back to its default.
TEST(ConfigReloader, AnEmptyFileIsRefused) {
  const auto r = reload_text("troupe_config_reloader_empty.toml", "\n  \n");
  EXPECT_FALSE(r.result.ok);
  EXPECT_EQ(r.applies, 0);
  EXPECT_NE(r.result.error.find(r.path + " is empty"), std::string::npos) << r.result.error;
}

TEST(ConfigReloader, AnUnknownRoutingPolicyIsRefusedWithItsKeyBeforeAnyApply) {
  const auto r = reload_text("troupe_config_reloader_router.toml", "[router]\npolicy = \"nope\"\n");
  EXPECT_FALSE(r.result.ok);
  EXPECT_EQ(r.applies, 0);
  EXPECT_NE(r.result.error.find(r.path + ":2:10: router.policy: unknown routing policy 'nope' (known: "), std::string::npos)
      << r.result.error;
}

TEST(ConfigDiff, WithRestartKeysOfSplitsAReloadInTwo) {
  troupe_config a = running_config(), b = running_config();
  b.pipeline.scheduler.policy = "sjf";
  b.pipeline.admission.tenants["bob"].tokens_per_s = 5;
  b.model.path = "models/other.gguf";
  b.backend.kv_bytes = int64_t{1024} << 20;  // kv.memory_mib = 1024
  b.plugins.push_back("libx.so");
  const troupe_config now = with_restart_keys_of(a, b);
  for (const auto& c : config_diff(a, now)) EXPECT_EQ(c.reload, reload_kind::hot) << c.key;
  for (const auto& c : config_diff(now, b)) EXPECT_EQ(c.reload, reload_kind::restart) << c.key;
  EXPECT_EQ(config_diff(a, now).size(), 5u);  // the policy and bob's four limits
  EXPECT_EQ(config_diff(now, b).size(), 3u);
}

}  // namespace
}  // namespace troupe::config

// The loader: defaults, every kind of error (with file, line and full key), registry names,
// overrides and their precedence.
#include "config/config_loader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>

#include "actors/scheduler/policy.hpp"
#include "config/config_diff.hpp"
#include "config/serve_flags.hpp"
#include "net/detail/request_reader.hpp"

namespace troupe::config {
namespace {

::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in:\n" << text;
}

std::string error_of(const std::string& text, const std::vector<config_override>& o = {},
                     const config_registries& r = config_registries::global()) {
  auto c = parse_config(text, "t.toml", o, r);
  EXPECT_FALSE(c.ok()) << "expected an error for:\n" << text;
  return c.ok() ? std::string() : c.error();
}

TEST(ConfigLoader, EmptyFileGivesTheDefaultsOfTheEngineStructs) {
  auto c = parse_config("", "empty.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(config_diff(troupe_config{}, c.value()).empty());
  EXPECT_EQ(c->server.host, "127.0.0.1");
  EXPECT_EQ(c->server.port, 8080);
  EXPECT_EQ(c->server.resume_window, std::chrono::seconds(60));
  EXPECT_EQ(c->model.backend, "cpu");
  EXPECT_EQ(c->backend.kv_bytes, int64_t{256} << 20);  // kv.memory_mib
  EXPECT_EQ(c->pipeline.scheduler.policy, "fcfs");
  EXPECT_EQ(c->pipeline.scheduler.max_num_seqs, 64);  // serve's default, not the bare pipeline's 32
  EXPECT_EQ(c->pipeline.admission.max_pending, 256);
  EXPECT_TRUE(c->pipeline.cache.enabled);
  EXPECT_EQ(c->pipeline.cache.policy, "semantic");
  EXPECT_FLOAT_EQ(c->pipeline.cache.semantic.threshold, 0.90f);
  EXPECT_EQ(c->logging.level, "info");
}

TEST(ConfigLoader, ReadsEverySectionsValues) {
  auto c = parse_config(R"(
plugins = ["libx.so"]
[server]
host = "0.0.0.0"
port = 9000
[scheduler]
policy = "sjf"
max_num_seqs = 8
[scheduler.policy_options]
aging_tokens_per_s = 10
[admission]
max_pending = 12
[admission.default_tenant]
tokens_per_s = 100
[admission.tenants.alice]
requests_per_s = 2.5
[cache]
threshold = 0.85
policy = "exact"
[[auth.api_keys]]
key = "k1"
tenant = "alice"
[logging]
level = "debug"
)",
                        "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->plugins, std::vector<std::string>{"libx.so"});
  EXPECT_EQ(c->server.host, "0.0.0.0");
  EXPECT_EQ(c->server.port, 9000);
  EXPECT_EQ(c->pipeline.scheduler.policy, "sjf");
  EXPECT_EQ(c->pipeline.scheduler.max_num_seqs, 8);
  EXPECT_DOUBLE_EQ(c->pipeline.scheduler.policy_opts.values.at("aging_tokens_per_s"), 10.0);  // an integer where a number goes
  EXPECT_EQ(c->pipeline.admission.max_pending, 12);
  EXPECT_DOUBLE_EQ(c->pipeline.admission.default_tenant.tokens_per_s, 100.0);
  EXPECT_DOUBLE_EQ(c->pipeline.admission.tenants.at("alice").requests_per_s, 2.5);
  EXPECT_DOUBLE_EQ(c->pipeline.admission.tenants.at("alice").tokens_per_s, 0.0);
  EXPECT_FLOAT_EQ(c->pipeline.cache.semantic.threshold, 0.85f);
  ASSERT_EQ(c->server.api_keys.size(), 1u);
  EXPECT_EQ(c->server.api_key_tenants[0], "alice");
  EXPECT_EQ(c->logging.level, "debug");
}

TEST(ConfigLoader, SyntaxErrorNamesFileAndLine) {
  const auto e = error_of("[server]\nport = \n");
  EXPECT_TRUE(has(e, "t.toml:2:"));
}

TEST(ConfigLoader, UnknownKeySuggestsTheClosestOne) {
  const auto e = error_of("[scheduler]\npolicy = \"fcfs\"\nmax_num_seq = 4\n");
  EXPECT_TRUE(has(e, "t.toml:3:1: scheduler.max_num_seq: unknown key; did you mean 'scheduler.max_num_seqs'?"));
}

TEST(ConfigLoader, UnknownSectionSuggestsTheClosestOne) {
  const auto e = error_of("[schedular]\nmax_num_seqs = 4\n");
  EXPECT_TRUE(has(e, "t.toml:1:2: schedular: unknown key; did you mean 'scheduler'?"));
}

TEST(ConfigLoader, UnknownKeyFarFromAnyListsTheSectionsKeys) {
  const auto e = error_of("[kv]\nwhatever = 1\n");
  EXPECT_TRUE(has(e, "t.toml:2:1: kv.whatever: unknown key (keys of [kv]: memory_mib, block_size, f32, q8, prefix_caching)"));
}

TEST(ConfigLoader, UnknownKeyInASubTableAndInANamedEntry) {
  EXPECT_TRUE(has(error_of("[cache.index]\nef_serch = 3\n"), "t.toml:2:1: cache.index.ef_serch: unknown key; did you mean 'cache.index.ef_search'?"));
  EXPECT_TRUE(has(error_of("[admission.tenants.bob]\ntokens_per_sec = 3\n"),
                  "t.toml:2:1: admission.tenants.bob.tokens_per_sec: unknown key; did you mean 'admission.tenants.bob.tokens_per_s'?"));
}

TEST(ConfigLoader, WrongTypeNamesLineKeyAndTypes) {
  EXPECT_TRUE(has(error_of("[scheduler]\nmax_num_seqs = \"many\"\n"),
                  "t.toml:2:16: scheduler.max_num_seqs: expected an integer, got a string"));
  EXPECT_TRUE(has(error_of("[kv]\nf32 = 1\n"), "t.toml:2:7: kv.f32: expected true or false, got an integer"));
  EXPECT_TRUE(has(error_of("[server]\nmax_body_bytes = 1.5\n"),
                  "server.max_body_bytes: expected an integer, got a floating-point number"));
  EXPECT_TRUE(has(error_of("scheduler = 3\n"), "t.toml:1:13: scheduler: expected a table, got an integer"));
  EXPECT_TRUE(has(error_of("plugins = \"a.so\"\n"), "plugins: expected an array, got a string"));
}

TEST(ConfigLoader, OutOfRangeNamesTheRange) {
  EXPECT_TRUE(has(error_of("[scheduler]\nmax_num_seqs = 0\n"),
                  "t.toml:2:16: scheduler.max_num_seqs: 0 is out of range (1..65536)"));
  EXPECT_TRUE(has(error_of("[server]\nport = 70000\n"), "t.toml:2:8: server.port: 70000 is out of range (0..65535)"));
  EXPECT_TRUE(has(error_of("[cache]\nthreshold = 1.5\n"), "t.toml:2:13: cache.threshold: 1.5 is out of range (0..1)"));
  EXPECT_TRUE(has(error_of("[admission.tenants.x]\ntokens_per_s = -1\n"),
                  "t.toml:2:16: admission.tenants.x.tokens_per_s: -1 is out of range"));
}

TEST(ConfigLoader, EnumeratedStringsListTheirValues) {
  EXPECT_TRUE(has(error_of("[logging]\nlevel = \"warning\"\n"),
                  "t.toml:2:9: logging.level: 'warning' is not one of trace, debug, info, warn, error, critical, off; "
                  "did you mean 'warn'?"));
  EXPECT_TRUE(has(error_of("[model]\npath = \"\"\n"), "t.toml:2:8: model.path: must not be empty"));
}

TEST(ConfigLoader, EveryErrorIsReportedOneALine) {
  const auto e = error_of("[server]\nport = -1\nio_threads = 0\n[kv]\nf32 = \"no\"\n");
  EXPECT_TRUE(has(e, "t.toml:2:8: server.port"));
  EXPECT_TRUE(has(e, "t.toml:3:14: server.io_threads"));
  EXPECT_TRUE(has(e, "t.toml:5:7: kv.f32"));
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 2);
}

TEST(ConfigLoader, UnknownNamesListTheRegisteredOnes) {
  std::string policies;
  for (const auto& n : actors::scheduling_policy_registry().names()) policies += (policies.empty() ? "" : ", ") + n;
  EXPECT_TRUE(has(policies, "fcfs, priority, sjf, static"));
  EXPECT_TRUE(has(error_of("[scheduler]\npolicy = \"fcsf\"\n"),
                  "t.toml:2:10: scheduler.policy: unknown scheduling policy 'fcsf' (known: " + policies +
                      "); did you mean 'fcfs'?"));
  EXPECT_TRUE(has(error_of("[cache]\npolicy = \"semantik\"\n"),
                  "t.toml:2:10: cache.policy: unknown response cache policy 'semantik' (known: exact, semantic); "
                  "did you mean 'semantic'?"));
  EXPECT_TRUE(has(error_of("[cache]\nembedder = \"bert\"\n"), "cache.embedder: unknown embedder 'bert' (known: "));
  EXPECT_TRUE(has(error_of("[model]\nbackend = \"tpu\"\n"), "t.toml:2:11: model.backend: unknown backend 'tpu' (known: cpu"));
  EXPECT_TRUE(has(error_of("[admission]\npolicy = \"fair\"\n"), "admission.policy: unknown admission policy 'fair' (known: token_bucket)"));
  EXPECT_TRUE(has(error_of("[router]\npolicy = \"least_loadd\"\n"),
                  "t.toml:2:10: router.policy: unknown routing policy 'least_loadd' (known: least_loaded, "
                  "prefix_affinity, round_robin); did you mean 'least_loaded'?"));
  EXPECT_TRUE(has(error_of("[[streamer.filters]]\nname = \"redakt\"\n"),
                  "t.toml:2:8: streamer.filters[0].name: unknown output filter 'redakt' (known: redact, stop_on); "
                  "did you mean 'redact'?"));
}

TEST(ConfigLoader, APolicysOwnCheckRejectsAnOptionItDoesNotKnow) {
  const auto e = error_of("[scheduler]\npolicy = \"sjf\"\n[scheduler.policy_options]\naging = 3.0\n");
  EXPECT_TRUE(has(e, "t.toml:4:9: scheduler.policy_options.aging: policy 'sjf' has no option 'aging' (it has: aging_tokens_per_s)"));
}

TEST(ConfigLoader, ARoutingPolicysOwnCheckRejectsAnOptionItDoesNotKnow) {
  const auto e = error_of("[router]\npolicy = \"round_robin\"\n[router.policy_options]\nmax_imbalance = 2.0\n");
  EXPECT_TRUE(has(e, "t.toml:4:17: router.policy_options.max_imbalance: routing policy 'round_robin' has no option 'max_imbalance'"));
  EXPECT_TRUE(parse_config("[router]\npolicy = \"prefix_affinity\"\n[router.policy_options]\nmax_imbalance = 2.0\n",
                           "t.toml", {}, config_registries::global())
                  .ok());
}

TEST(ConfigLoader, RegistriesCanBeInjected) {
  config_registries r = config_registries::global();
  r.filters = [] { return std::vector<std::string>{"redact"}; };
  r.filter_options = {};  // made-up options: this is about TOML values, not the filter
  auto c = parse_config(R"(
[[streamer.filters]]
name = "redact"
options = { words = ["a", "b"], stop = true, limit = 3, ratio = 0.5, with = "x" }
)",
                        "t.toml", {}, r);
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->pipeline.streamer.filters.size(), 1u);
  const auto& o = c->pipeline.streamer.filters[0].options;
  EXPECT_EQ(std::get<std::vector<std::string>>(o.at("words")), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(std::get<bool>(o.at("stop")), true);
  EXPECT_EQ(std::get<int64_t>(o.at("limit")), 3);
  EXPECT_EQ(std::get<double>(o.at("ratio")), 0.5);
  EXPECT_EQ(std::get<std::string>(o.at("with")), "x");

  // unchecked(): any name (a first read, before plugins register theirs).
  auto u = parse_config("[scheduler]\npolicy = \"from_a_plugin\"\n", "t.toml", {}, config_registries::unchecked());
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->pipeline.scheduler.policy, "from_a_plugin");
}

TEST(ConfigLoader, KeysThatMustAgree) {
  EXPECT_TRUE(has(error_of("[admission]\nmax_tokens_cap = 100\ndefault_max_tokens = 200\n"),
                  "t.toml:3:22: admission.default_max_tokens: admission.default_max_tokens (200) exceeds admission.max_tokens_cap (100)"));
}

TEST(ConfigLoader, TheAdminTokenAndTenantNamesStandApart) {
  EXPECT_TRUE(has(error_of("[auth]\nadmin_token = \"k\"\n[[auth.api_keys]]\nkey = \"k\"\n"),
                  "auth.admin_token equals one of auth.api_keys"));
  // key0 is the first key's tenant when it names none: another key may not take that name.
  EXPECT_TRUE(has(error_of("[[auth.api_keys]]\nkey = \"a\"\n[[auth.api_keys]]\nkey = \"b\"\ntenant = \"key0\"\n"),
                  "auth.api_keys[1].tenant 'key0' is the name an unnamed key gets"));
  EXPECT_TRUE(parse_config("[[auth.api_keys]]\nkey = \"a\"\ntenant = \"key0\"\n[[auth.api_keys]]\nkey = \"b\"\n"
                           "tenant = \"keyboard\"\n",
                           "t.toml")
                  .ok());
}

TEST(ConfigLoader, ApiKeyEntriesAreChecked) {
  EXPECT_TRUE(has(error_of("[[auth.api_keys]]\ntenant = \"a\"\n"), "t.toml:1:1: auth.api_keys[0]: missing 'key'"));
  EXPECT_TRUE(has(error_of("[[auth.api_keys]]\nkey = \"k\"\n[[auth.api_keys]]\nkey = \"k\"\n"),
                  "auth.api_keys[1].key: the same API key is listed twice"));
  EXPECT_TRUE(has(error_of("[[auth.api_keys]]\nkey = \"k\"\nteanat = \"a\"\n"),
                  "t.toml:3:1: auth.api_keys[0].teanat: unknown key; did you mean 'auth.api_keys[0].tenant'?"));
}

TEST(ConfigOverrides, SetAppliesAfterTheFileAndNamesItselfInErrors) {
  const std::string file = "[scheduler]\nmax_num_seqs = 8\n";
  auto s = parse_set("scheduler.max_num_seqs=16");
  ASSERT_TRUE(s.ok());
  auto c = parse_config(file, "t.toml", {s.value()});
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->pipeline.scheduler.max_num_seqs, 16);

  // A value that is not TOML is a string.
  auto p = parse_config("", "t.toml", {parse_set("model.path=models/x.gguf").value()});
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->model.path, "models/x.gguf");

  // Tables merge: one tenant's key is set without losing the file's others.
  auto t = parse_config("[admission.tenants.a]\nrequests_per_s = 1\n", "t.toml",
                        {parse_set("admission.tenants.a.tokens_per_s=50").value()});
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_DOUBLE_EQ(t->pipeline.admission.tenants.at("a").requests_per_s, 1);
  EXPECT_DOUBLE_EQ(t->pipeline.admission.tenants.at("a").tokens_per_s, 50);

  EXPECT_TRUE(has(error_of(file, {parse_set("scheduler.max_num_seqs=lots").value()}),
                  "--set scheduler.max_num_seqs=lots: scheduler.max_num_seqs: expected an integer, got a string"));
  EXPECT_TRUE(has(error_of(file, {parse_set("scheduler.max_num_seq=4").value()}),
                  "--set scheduler.max_num_seq=4: scheduler.max_num_seq: unknown key; did you mean 'scheduler.max_num_seqs'?"));
  EXPECT_FALSE(parse_set("scheduler.max_num_seqs").ok());
  EXPECT_TRUE(has(parse_set("=3").error(), "expected section.key=value"));
}

TEST(ConfigOverrides, FlagsOverrideTheFileAndSetOverridesFlags) {
  const std::string file = "[server]\nhost = \"10.0.0.1\"\nport = 7000\n[scheduler]\nmax_num_seqs = 8\n[kv]\nmemory_mib = 64\n";
  serve_flags f;
  f.listen = "[::1]:9000";
  f.max_seqs = 12;
  f.no_cache = true;
  f.api_keys = {"k\"1", "k2"};
  auto flags = to_overrides(f);
  ASSERT_TRUE(flags.ok()) << flags.error();
  auto o = flags.value();
  o.push_back(parse_set("scheduler.max_num_seqs=20").value());  // cmd_serve puts --set after the flags
  auto c = parse_config(file, "t.toml", o);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->server.host, "::1");
  EXPECT_EQ(c->server.port, 9000);
  EXPECT_EQ(c->pipeline.scheduler.max_num_seqs, 20);
  EXPECT_EQ(c->backend.kv_bytes, int64_t{64} << 20);  // kv.memory_mib: no flag given, the file's value stays
  EXPECT_FALSE(c->pipeline.cache.enabled);
  ASSERT_EQ(c->server.api_keys.size(), 2u);
  EXPECT_EQ(c->server.api_keys[0], "k\"1");

  // Without the --set, the flag wins over the file.
  auto only_flags = parse_config(file, "t.toml", flags.value());
  ASSERT_TRUE(only_flags.ok());
  EXPECT_EQ(only_flags->pipeline.scheduler.max_num_seqs, 12);

  serve_flags bad;
  bad.listen = "localhost";
  EXPECT_TRUE(has(to_overrides(bad).error(), "--listen wants HOST:PORT"));
  serve_flags far;
  far.listen = "127.0.0.1:99999";
  auto fo = to_overrides(far);
  ASSERT_TRUE(fo.ok());
  EXPECT_TRUE(has(error_of("", fo.value()), "--listen 127.0.0.1:99999: server.port: 99999 is out of range (0..65535)"));
}

// The request parser refuses a 5th stop string whatever the config says, so the key may only
// lower the limit: a value it could not honour is refused, not silently ignored.
TEST(ConfigLoader, MaxStopStringsStaysWithinWhatTheRequestParserAccepts) {
  const auto most = std::to_string(net::detail::max_stop_strings);
  const auto one_more = std::to_string(net::detail::max_stop_strings + 1);
  EXPECT_TRUE(has(error_of("[admission]\nmax_stop_strings = " + one_more + "\n"),
                  "t.toml:2:20: admission.max_stop_strings: " + one_more + " is out of range (0.." + most + ")"));
  auto c = parse_config("[admission]\nmax_stop_strings = " + most + "\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->pipeline.admission.max_stop_strings, static_cast<int32_t>(net::detail::max_stop_strings));
  EXPECT_EQ(troupe_config{}.pipeline.admission.max_stop_strings, static_cast<int32_t>(net::detail::max_stop_strings));
}

TEST(ConfigLoader, LoadConfigNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/troupe_config_loader_test.toml";
  {
    std::ofstream out(path);
    out << "[server]\nport = 8081\n\n[kv]\nblock_size = 0\n";
  }
  auto c = load_config(path);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.error(), path + ":5:14: kv.block_size: 0 is out of range (1..1024)"));
  std::remove(path.c_str());

  auto missing = load_config("/nonexistent/troupe.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(has(missing.error(), "cannot read config file '/nonexistent/troupe.toml'"));
}

// An empty text is every default, so a directory read as one would start (or reload) silently
// with the defaults.
TEST(ConfigLoader, ADirectoryIsNotAConfigFile) {
  const std::string dir = ::testing::TempDir() + "/troupe_config_loader_dir.toml";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  auto c = load_config(dir);
  ::rmdir(dir.c_str());
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.error(), "cannot read config file '" + dir + "': Is a directory"));

  auto via_resolve = resolve_config("/tmp", "", {});
  ASSERT_FALSE(via_resolve.ok());
  EXPECT_TRUE(has(via_resolve.error(), "cannot read config file '/tmp': Is a directory"));
}

// A named pipe read as the config would block startup, or a reload (which resolves the config
// the same way) for good, until something wrote to it.
TEST(ConfigLoader, ANamedPipeIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = ::testing::TempDir() + "/troupe_config_loader_fifo.toml";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return resolve_config(fifo, "", {}); });
  const bool returned = pending.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!returned) {
    // A writer releases the open that waits for one, so the test fails instead of hanging.
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  auto c = pending.get();
  ::unlink(fifo.c_str());
  ASSERT_TRUE(returned) << "reading a named pipe as the config blocked";
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(has(c.error(), "cannot read config file '" + fifo + "': it is a named pipe, not a regular file"));

  auto device = load_config("/dev/null");
  ASSERT_FALSE(device.ok());
  EXPECT_TRUE(has(device.error(), "'/dev/null': it is a character device, not a regular file"));

  // A config is a few KB: a file over 1 MiB is refused before the parser sees it (a 10 MB key
  // took toml++ 2.6 GB and 36 s).
  const std::string big = ::testing::TempDir() + "/troupe_config_loader_big.toml";
  {
    std::ofstream out(big);
    out << "# " << std::string(size_t{1} << 20, 'x') << "\n";
  }
  auto large = load_config(big);
  ASSERT_FALSE(large.ok());
  EXPECT_TRUE(has(large.error(), "is larger than 1 MiB"));
  std::remove(big.c_str());
}

// A replica is declared dead after missing reports, not one: dead_after_ms under twice report_ms
// made an idle worker flap (dead, rejoined under a new id) at every report.
TEST(ConfigLoader, DeadAfterMustSpanTwoReports) {
  EXPECT_TRUE(has(error_of("[cluster]\ndead_after_ms = 400\n"),
                  "cluster.dead_after_ms: cluster.dead_after_ms (400) must be at least twice cluster.report_ms (250)"));
  EXPECT_TRUE(has(error_of("[cluster]\nreport_ms = 2000\n"), "cluster.report_ms: cluster.dead_after_ms (3000)"));
  EXPECT_TRUE(parse_config("[cluster]\ndead_after_ms = 500\n", "t.toml", {}, config_registries::global()).ok());
}

// What serve refused only after it had started listening is refused by the config itself, so
// that `troupe config check` says so too.
TEST(ConfigLoader, KvFormatsAndHttpTlsFilesMustAgree) {
  EXPECT_TRUE(has(error_of("[kv]\nf32 = true\nq8 = true\n"), "kv.q8: kv memory is either f32 or q8"));
  EXPECT_TRUE(has(error_of("[server]\ntls_cert = \"/etc/hostname\"\n"), "go together: set both or neither"));
  EXPECT_TRUE(has(error_of("[server]\ntls_cert = \"/nonexistent.pem\"\ntls_key = \"/nonexistent.key\"\n"),
                  "server.tls_key: cannot read '/nonexistent.key'"));
}

}  // namespace
}  // namespace troupe::config

// The example plugins (examples/plugins), each loaded the way `troupe serve` loads it: named in a
// config file's `plugins`, which is read in two passes (config_plugins.hpp), then chosen by name.
//   fair_share:   with one sequence at a time, a tenant of weight 3 gets three turns for one;
//   daily_quota:  a tenant over its day's tokens is refused rate_limited, also after a restart;
//   pattern_stop: a stream ends before the text that matches, with finish_reason "filtered";
//   tenant_affinity: a tenant's requests go to its home replica (rendezvous hash, pinned below)
//                    until that one is over max_queued_tokens; a reload switches the router to it
//                    and back while serving.
// Also: names from plugins check like built-in ones, and an unknown one lists them.
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "actors/client.hpp"
#include "actors/router/router_state.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "config/config_plugins.hpp"
#include "config/config_reloader.hpp"
#include "config/troupe_config.hpp"
#include "tests/actors/router/router_state_harness.hpp"
#include "tests/support/fake_backend.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

namespace {

std::string example(const std::string& name) { return std::string(TROUPE_EXAMPLE_PLUGIN_DIR) + "/libtroupe_" + name + ".so"; }

// Writes `body` after a `plugins` line naming the example plugins; answers the file's path.
std::string write_config(const test::temp_dir& dir, const std::string& body) {
  const std::string path = dir.str("troupe.toml");
  std::ofstream(path) << "plugins = [\"" << example("fair_share") << "\", \"" << example("daily_quota") << "\", \""
                      << example("pattern_stop") << "\", \"" << example("tenant_affinity") << "\"]\n"
                      << body;
  return path;
}

// write_config, then reads it as serve does.
result<config::troupe_config> load(const test::temp_dir& dir, const std::string& body) {
  auto c = config::resolve_config_with_plugins(write_config(dir, body), "");
  if (!c) return make_error(c.error());
  return c->config;
}

pipeline_config to_pipeline(const config::troupe_config& c) {
  pipeline_config p = c.pipeline;
  p.model_name = "fake";
  return p;
}

request_spec spec(const std::string& prompt, int32_t max_tokens, const std::string& tenant) {
  request_spec s;
  s.prompt = prompt;
  s.max_tokens = max_tokens;
  s.tenant = tenant;
  return s;
}

}  // namespace

TEST(example_plugins, fair_share_gives_a_heavier_tenant_more_turns) {
  test::temp_dir dir("fair-share");
  auto c = load(dir, R"(
[scheduler]
policy = "fair_share"
max_num_seqs = 1
[scheduler.policy_options]
weight_alice = 3.0
[cache]
enabled = false
)");
  ASSERT_TRUE(c.ok()) << c.error();
  runtime rt;
  test::fake_options fo;
  fo.step_us = 3000;  // every request waits while the first runs
  auto pc = to_pipeline(*c);
  pc.scheduler.prefix_caching = false;  // every request computes its whole prompt: equal costs
  auto p = pipeline::start(rt.system(), pc,
                           [fo]() -> result<std::unique_ptr<model::backend>> {
                             return std::unique_ptr<model::backend>(new test::fake_backend(fo));
                           },
                           make_byte_codec(fo.n_vocab, fo.eog));
  ASSERT_TRUE(p.ok()) << p.error();
  client cl(**p);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> order;
  std::vector<request_handle> handles;
  // alice's four first, then bob's: prompts and lengths alike, so equal costs.
  for (const char* who : {"a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"}) {
    const std::string label = who;
    auto s = spec(label + label + label + label, 6, label[0] == 'a' ? "alice" : "bob");
    s.ignore_eos = true;
    handles.push_back(cl.submit(s, [&, label](const event& e) {
      if (std::holds_alternative<token_event>(e)) return;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(std::holds_alternative<done_event>(e) ? label : label + "!failed");
      cv.notify_all();
    }));
    // One at a time through admission, so that arrival order is submission order.
    for (int i = 0; i < 1000 && handles.back().id() == 0; ++i) std::this_thread::sleep_for(1ms);
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return order.size() == 8; }));
  // FCFS would finish a1..a4 then b1..b4; equal weights would alternate. Weight 3 to 1: bob's
  // first request goes once (a tenant not served yet goes first), then alice has three turns.
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2", "a3", "a4", "b2", "b3", "b4"}));
}

// daily_quota is an admission actor: admission asks it about each request and tells it each
// close; it writes the day's use behind (50 ms) and when it stops.
TEST(example_plugins, daily_quota_refuses_past_the_quota_and_remembers_it_after_a_restart) {
  test::temp_dir dir("quota");
  auto c = load(dir, "[admission]\npolicy = \"daily_quota\"\n[admission.policy_options]\npath = \"" +
                         dir.str("state/quota.tsv") + "\"\ndaily_tokens = 40\ntokens_bob = 1000\n[cache]\nenabled = false\n");
  ASSERT_TRUE(c.ok()) << c.error();
  test::fake_options fo;
  auto pc = to_pipeline(*c);
  auto backend = [fo]() -> result<std::unique_ptr<model::backend>> {
    return std::unique_ptr<model::backend>(new test::fake_backend(fo));
  };
  auto ignoring_eos = [](request_spec s) {
    s.ignore_eos = true;
    return s;
  };
  runtime rt;
  {
    auto p = pipeline::start(rt.system(), pc, backend, make_byte_codec(fo.n_vocab, fo.eog));
    ASSERT_TRUE(p.ok()) << p.error();
    client cl(**p);
    for (int i = 0; i < 2; ++i) {  // 5 prompt + 10 max_tokens each: 15 reserved, 15 used
      auto out = cl.submit(ignoring_eos(spec("hello", 10, "alice")))->wait(30s);
      ASSERT_TRUE(out.ok()) << out.error.message;
    }
    auto refused = cl.submit(ignoring_eos(spec("hello", 10, "alice")))->wait(30s);  // 30 + 15 > 40
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error.code, errc::rate_limited);
    EXPECT_NE(refused.error.message.find("has used 30 of its 40 tokens today"), std::string::npos)
        << refused.error.message;
    EXPECT_GT(refused.error.retry_after_ms, 0);
    EXPECT_LE(refused.error.retry_after_ms, 86'400'000);
    EXPECT_TRUE(cl.submit(ignoring_eos(spec("hello", 4, "alice")))->wait(30s).ok());  // 30 + 9 fits
    EXPECT_TRUE(cl.submit(ignoring_eos(spec("hello", 10, "bob")))->wait(30s).ok());   // bob has his own quota
  }  // the pipeline stops, and with it the actor, which writes what is left
  // The actor stops after the pipeline's stop returns, and the file may already hold an earlier
  // write-behind: read until the last close is in (a slow host, valgrind), for 10 s at most.
  const std::set<std::string> want{"alice\t39", "bob\t15"};
  std::string day;
  std::set<std::string> lines;
  for (int i = 0; i < 1000; ++i) {
    std::ifstream file(dir.str("state/quota.tsv"));
    std::string line;
    day.clear();
    lines.clear();
    std::getline(file, day);
    while (std::getline(file, line)) lines.insert(line);
    if (lines == want) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(day.rfind("day ", 0), 0u) << day;
  EXPECT_EQ(lines, want) << "the file holds every close";
  // A new pipeline (a restarted server) reads the day's use back.
  auto p = pipeline::start(rt.system(), pc, backend, make_byte_codec(fo.n_vocab, fo.eog));
  ASSERT_TRUE(p.ok()) << p.error();
  client cl(**p);
  auto refused = cl.submit(ignoring_eos(spec("hello", 10, "alice")))->wait(30s);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error.code, errc::rate_limited);
  EXPECT_NE(refused.error.message.find("has used 39 of its 40 tokens today"), std::string::npos)
      << refused.error.message;
  // Its options are checked when the config is read, naming the key.
  auto bad = load(dir, "[admission]\npolicy = \"daily_quota\"\n[admission.policy_options]\npath = \"x\"\ndaily_token = 5\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("admission.policy_options.daily_token"), std::string::npos) << bad.error();
  EXPECT_NE(bad.error().find("has no option 'daily_token'"), std::string::npos) << bad.error();
}

// pattern_stop is a filter actor on the stream's path: the text before the match goes out, the
// stream ends "filtered", and its sequence is dropped.
TEST(example_plugins, pattern_stop_ends_a_stream_before_the_match) {
  test::temp_dir dir("pattern");
  auto c = load(dir, R"(
[[streamer.filters]]
name = "pattern_stop"
options = { pattern = "[0-9]{3}-[0-9]{4}", window = 16 }
[cache]
enabled = false
)");
  ASSERT_TRUE(c.ok()) << c.error();
  // A backend that "generates" a fixed text, one byte per token, whatever the prompt.
  const std::string said = "call me at 555-1234 tonight, or at 555-9876 tomorrow";
  test::fake_options fo;
  fo.step_us = 1000;
  fo.script = std::vector<int32_t>(said.begin(), said.end());
  runtime rt;
  auto p = pipeline::start(rt.system(), to_pipeline(*c),
                           [fo]() -> result<std::unique_ptr<model::backend>> {
                             return std::unique_ptr<model::backend>(new test::fake_backend(fo));
                           },
                           make_byte_codec(fo.n_vocab, fo.eog));
  ASSERT_TRUE(p.ok()) << p.error();
  client cl(**p);
  auto s = spec("x", static_cast<int32_t>(said.size()), "alice");
  s.ignore_eos = true;
  auto out = cl.submit(s)->wait(30s);
  ASSERT_TRUE(out.ok()) << out.error.message;
  EXPECT_EQ(out.text, "call me at ");
  EXPECT_EQ(out.finish_reason, finish::filtered);
  EXPECT_LT(out.tokens.size(), said.size()) << "the sequence was dropped before its max_tokens";
  for (int i = 0; i < 200; ++i) {
    auto st = (*p)->get_scheduler_stats();
    if (st.ok() && st->kv_blocks_available == st->kv_blocks_total) break;
    std::this_thread::sleep_for(10ms);
  }
  auto st = (*p)->get_scheduler_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->kv_blocks_available, st->kv_blocks_total);
}

TEST(example_plugins, names_from_plugins_check_and_unknown_names_list_them) {
  test::temp_dir dir("names");
  auto c = load(dir, "[scheduler]\npolicy = \"fair_shares\"\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("unknown scheduling policy 'fair_shares'"), std::string::npos) << c.error();
  EXPECT_NE(c.error().find("fair_share, fcfs"), std::string::npos) << c.error();
  EXPECT_NE(c.error().find("did you mean 'fair_share'"), std::string::npos) << c.error();
  auto f = load(dir, "[[streamer.filters]]\nname = \"patern_stop\"\n");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("unknown output filter 'patern_stop' (known: pattern_stop, redact, stop_on)"),
            std::string::npos)
      << f.error();
  auto opts = load(dir, "[[streamer.filters]]\nname = \"pattern_stop\"\noptions = { pattern = \"(\" }\n");
  ASSERT_FALSE(opts.ok());
  EXPECT_NE(opts.error().find("streamer.filters[0].options"), std::string::npos) << opts.error();
  EXPECT_NE(opts.error().find("not a valid regular expression"), std::string::npos) << opts.error();
}

namespace {

replica_view replica(uint64_t id, int64_t queued_tokens) {
  replica_view v;
  v.id = id;
  v.queued_tokens = queued_tokens;
  return v;
}

// The id of the replica `p` picks for a request of `tenant` among `replicas`.
uint64_t pick_for(routing_policy& p, const std::string& tenant, const std::vector<replica_view>& replicas) {
  route_request r;
  r.id = 1;
  r.prompt_tokens = 20;
  r.max_tokens = 100;
  r.tenant = tenant;
  const auto i = p.pick(r, replicas);
  EXPECT_TRUE(i && *i < replicas.size()) << tenant;
  return i && *i < replicas.size() ? replicas[*i].id : ~0ull;
}

admitted_request request_of(uint64_t id, const std::string& tenant) {
  auto r = router_test::request(id, router_test::tokens(1, 20), 100);  // charged 120 tokens
  r.tenant = tenant;
  return r;
}

}  // namespace

// tenant_affinity on plain replica views, made from the config as the router makes it. The
// homes are pinned: a change of hash would move every tenant's cached prefixes at an upgrade.
TEST(example_plugins, tenant_affinity_sends_a_tenant_home_until_home_is_over_max_queued_tokens) {
  test::temp_dir dir("tenant-affinity");
  auto c = load(dir, "[router]\npolicy = \"tenant_affinity\"\n[router.policy_options]\nmax_queued_tokens = 1000\n");
  ASSERT_TRUE(c.ok()) << c.error();
  const auto& rc = c->pipeline.router;
  EXPECT_EQ(rc.policy, "tenant_affinity");
  auto made = routing_policy_registry().make(rc.policy, rc.policy_opts);
  ASSERT_TRUE(made.ok()) << made.error();
  routing_policy& p = *made.value();
  EXPECT_EQ(p.name(), "tenant_affinity");

  std::vector<replica_view> four{replica(0, 300), replica(1, 200), replica(2, 100), replica(3, 400)};  // least: 2
  EXPECT_EQ(pick_for(p, "alice", four), 1u);
  EXPECT_EQ(pick_for(p, "bob", four), 1u);
  EXPECT_EQ(pick_for(p, "carol", four), 0u);
  EXPECT_EQ(pick_for(p, "dave", four), 3u);
  EXPECT_EQ(pick_for(p, "erin", four), 2u);
  // By id, not by position: the router lists the candidates in its own order.
  const std::vector<replica_view> reversed(four.rbegin(), four.rend());
  for (const char* t : {"alice", "bob", "carol", "dave", "erin"}) EXPECT_EQ(pick_for(p, t, reversed), pick_for(p, t, four)) << t;
  // A replica that leaves moves only the tenants it was home to.
  const std::vector<replica_view> without_3{four[0], four[1], four[2]};
  EXPECT_EQ(pick_for(p, "alice", without_3), 1u);
  EXPECT_EQ(pick_for(p, "carol", without_3), 0u);
  EXPECT_EQ(pick_for(p, "erin", without_3), 2u);
  EXPECT_EQ(pick_for(p, "dave", without_3), 0u);
  const std::vector<replica_view> without_1{four[0], four[2], four[3]};
  EXPECT_EQ(pick_for(p, "alice", without_1), 3u);
  EXPECT_EQ(pick_for(p, "bob", without_1), 2u);
  EXPECT_EQ(pick_for(p, "carol", without_1), 0u);
  EXPECT_EQ(pick_for(p, "dave", without_1), 3u);
  // Home at the limit still takes the request; past it, the least loaded replica does, and only
  // for the tenants of that home.
  four[1].queued_tokens = 1000;
  EXPECT_EQ(pick_for(p, "alice", four), 1u);
  four[1].queued_tokens = 1001;
  EXPECT_EQ(pick_for(p, "alice", four), 2u);
  EXPECT_EQ(pick_for(p, "bob", four), 2u);
  EXPECT_EQ(pick_for(p, "carol", four), 0u);
  EXPECT_EQ(pick_for(p, "dave", four), 3u);
  // No tenant (admission says "default"): nothing to keep together, the least loaded.
  EXPECT_EQ(pick_for(p, "default", four), 2u);
  EXPECT_EQ(pick_for(p, "", four), 2u);
  // Tenants spread over the replicas.
  const std::vector<replica_view> idle{replica(0, 0), replica(1, 0), replica(2, 0), replica(3, 0)};
  std::map<uint64_t, int> per_replica;
  for (int i = 0; i < 100; ++i) ++per_replica[pick_for(p, "t" + std::to_string(i), idle)];
  ASSERT_EQ(per_replica.size(), 4u);
  for (const auto& [id, n] : per_replica) EXPECT_GE(n, 10) << "replica " << id;

  // Its options are checked when the config is read, naming the key.
  auto typo = load(dir, "[router]\npolicy = \"tenant_affinity\"\n[router.policy_options]\nmax_queued_token = 5\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.error().find("router.policy_options.max_queued_token: routing policy 'tenant_affinity' has no "
                              "option 'max_queued_token' (it has: max_queued_tokens)"),
            std::string::npos)
      << typo.error();
  auto negative = load(dir, "[router]\npolicy = \"tenant_affinity\"\n[router.policy_options]\nmax_queued_tokens = -1\n");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.error().find("max_queued_tokens must be >= 0"), std::string::npos) << negative.error();
  auto unknown = load(dir, "[router]\npolicy = \"tenant_afinity\"\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("unknown routing policy 'tenant_afinity'"), std::string::npos) << unknown.error();
  EXPECT_NE(unknown.error().find("did you mean 'tenant_affinity'"), std::string::npos) << unknown.error();
}

// The router's own state with the plugin's policy: it hands the policy the request's tenant and
// its own count of each replica's queued tokens, which finished requests give back.
TEST(example_plugins, tenant_affinity_places_a_tenants_requests_through_the_router) {
  test::temp_dir dir("tenant-router");
  auto c = load(dir, "[router]\npolicy = \"tenant_affinity\"\n[router.policy_options]\nmax_queued_tokens = 1000\n");
  ASSERT_TRUE(c.ok()) << c.error();
  auto made = routing_policy_registry().make(c->pipeline.router.policy, c->pipeline.router.policy_opts);
  ASSERT_TRUE(made.ok()) << made.error();
  router_state s(c->pipeline.router, std::move(made.value()));
  s.add_local(router_test::block, 0);                     // 0
  for (const char* w : {"a", "b", "c"}) s.add_replica(w, router_test::block, 0);  // 1, 2, 3
  // alice's home is 1: nine requests of 120 tokens fit under 1000 queued there (960 before the
  // ninth), the tenth goes to the least loaded (all else idle: the lowest id).
  for (uint64_t id = 1; id <= 9; ++id) {
    s.enqueue(request_of(id, "alice"), 0);
    EXPECT_EQ(router_test::placed_on(s), 1u) << "request " << id;
  }
  s.enqueue(request_of(10, "alice"), 0);
  EXPECT_EQ(router_test::placed_on(s), 0u);
  s.enqueue(request_of(11, "erin"), 0);  // her home is 2, idle
  EXPECT_EQ(router_test::placed_on(s), 2u);
  // Two of alice's finish at home: it is under the limit again and takes her next one.
  s.on_output(1, router_test::finished_out(1, "stop", 20, 10));
  s.on_output(1, router_test::finished_out(2, "stop", 20, 10));
  (void)s.take_effects();
  s.enqueue(request_of(12, "alice"), 0);
  EXPECT_EQ(router_test::placed_on(s), 1u);
  EXPECT_EQ(s.stats().policy, "tenant_affinity");
}

// What POST /admin/reload and SIGHUP do in `troupe serve`: the file is read again (the plugin's
// name checks, it was loaded at startup), the router takes the new policy while serving, and
// requests go on being served.
TEST(example_plugins, a_reload_switches_the_router_to_tenant_affinity_and_back) {
  test::temp_dir dir("tenant-reload");
  auto c = load(dir, "[router]\npolicy = \"least_loaded\"\n[cache]\nenabled = false\n");
  ASSERT_TRUE(c.ok()) << c.error();
  test::fake_options fo;
  runtime rt;
  auto p = pipeline::start(rt.system(), to_pipeline(*c),
                           [fo]() -> result<std::unique_ptr<model::backend>> {
                             return std::unique_ptr<model::backend>(new test::fake_backend(fo));
                           },
                           make_byte_codec(fo.n_vocab, fo.eog));
  ASSERT_TRUE(p.ok()) << p.error();
  client cl(**p);
  config::config_reloader reloader(*c, dir.str("troupe.toml"), "", {});
  auto apply = [&](const config::troupe_config& next, const std::set<std::string>& stages) {
    return (*p)->reconfigure(to_pipeline(next), stages);
  };
  auto policy_now = [&] {
    auto st = (*p)->get_router_stats();
    return st.ok() ? st->policy : "(no stats: " + st.error() + ")";
  };
  auto serves = [&](const std::string& tenant) { return cl.submit(spec("hello", 4, tenant))->wait(30s).ok(); };
  EXPECT_EQ(policy_now(), "least_loaded");
  EXPECT_TRUE(serves("alice"));

  write_config(dir, "[router]\npolicy = \"tenant_affinity\"\n[router.policy_options]\nmax_queued_tokens = 500\n"
                    "[cache]\nenabled = false\n");
  auto to = reloader.reload(apply);
  ASSERT_TRUE(to.ok) << to.error;
  EXPECT_NE(std::find(to.replaced.begin(), to.replaced.end(), "router"), to.replaced.end());
  EXPECT_EQ(policy_now(), "tenant_affinity");
  EXPECT_EQ((*p)->config().router.policy_opts.values, (std::map<std::string, double>{{"max_queued_tokens", 500.0}}));
  EXPECT_TRUE(serves("alice"));
  EXPECT_TRUE(serves(""));

  // Options it refuses: the reload is rejected whole, naming the key, and the policy stays.
  write_config(dir, "[router]\npolicy = \"tenant_affinity\"\n[router.policy_options]\nmax_queued_token = 5\n"
                    "[cache]\nenabled = false\n");
  auto bad = reloader.reload(apply);
  ASSERT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("router.policy_options.max_queued_token"), std::string::npos) << bad.error;
  EXPECT_EQ(policy_now(), "tenant_affinity");

  write_config(dir, "[router]\npolicy = \"least_loaded\"\n[cache]\nenabled = false\n");
  auto back = reloader.reload(apply);
  ASSERT_TRUE(back.ok) << back.error;
  EXPECT_EQ(policy_now(), "least_loaded");
  EXPECT_TRUE(serves("alice"));
}

// The example plugins (examples/plugins), each loaded the way `troupe serve` loads it: named in a
// config file's `plugins`, which is read in two passes (config_plugins.hpp), then chosen by name.
//   fair_share:   with one sequence at a time, a tenant of weight 3 gets three turns for one;
//   daily_quota:  a tenant over its day's tokens is refused rate_limited, also after a restart;
//   pattern_stop: a stream ends before the text that matches, with finish_reason "filtered".
// Also: names from plugins check like built-in ones, and an unknown one lists them.
#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "actors/client.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "config/config_plugins.hpp"
#include "config/troupe_config.hpp"
#include "tests/support/fake_backend.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

namespace {

std::string example(const std::string& name) { return std::string(TROUPE_EXAMPLE_PLUGIN_DIR) + "/libtroupe_" + name + ".so"; }

// Writes `body` after a `plugins` line naming the example plugins, and reads it as serve does.
result<config::troupe_config> load(const test::temp_dir& dir, const std::string& body) {
  const std::string path = dir.str("troupe.toml");
  std::ofstream(path) << "plugins = [\"" << example("fair_share") << "\", \"" << example("daily_quota") << "\", \""
                      << example("pattern_stop") << "\"]\n"
                      << body;
  auto c = config::resolve_config_with_plugins(path, "");
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

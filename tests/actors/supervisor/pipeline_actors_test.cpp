// Custom actors in the pipeline (fake backend): filter actors (filter_actor.hpp) on the path
// from the streamer to each consumer, and admission actors (admission_gate.hpp) asked by
// admission. Registered in process here, as a plugin's entry point would (the example plugins
// are tested through config in example_plugins_test.cpp). What is asserted: their output
// reaches the consumer in order and complete; a filter actor that ends a stream frees its
// sequence; an actor that stops fails only the requests that were waiting on it, with an error
// naming it, and is started again for the next ones; a filter actor that stops answering fails
// its streams after streamer.filter_timeout_ms, naming it, with their KV freed (a slow stream
// whose events each pass in time does not); a silent admission actor times out; an
// admission actor swapped in and out under running requests sees every one of them close.
#include "actors/supervisor/pipeline.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <thread>

#include <caf/all.hpp>

#include "actors/admission/gate.hpp"
#include "actors/client.hpp"
#include "actors/streamer/filters/filter_actor.hpp"
#include "actors/runtime.hpp"
#include "tests/support/changed_stages.hpp"
#include "tests/support/fake_pipeline.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;
using troupe::test::fake_options;

namespace {

// --- filter actors -------------------------------------------------------------------------

struct route_state {
  std::unordered_map<uint64_t, filter_open> streams;
  int32_t seen = 0;  // token events, all streams
};

// Upper-cases letters; with `crash_after` > 0, stops with an error at that token event.
filter_actor::behavior_type upper_fn(filter_actor::stateful_pointer<route_state> self, int32_t crash_after) {
  return {
      [=](open_atom, filter_open& f) { self->state.streams[f.context.id] = std::move(f); },
      [=](token_event& ev) {
        auto it = self->state.streams.find(ev.request_id);
        if (it == self->state.streams.end()) return;
        if (crash_after > 0 && ++self->state.seen == crash_after) {
          self->quit(caf::make_error(caf::sec::runtime_error, "deliberate crash"));
          return;
        }
        for (auto& ch : ev.text) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        self->send(it->second.next, std::move(ev));
      },
      [=](done_event& d) {
        auto it = self->state.streams.find(d.request_id);
        if (it == self->state.streams.end()) return;
        self->send(it->second.next, std::move(d));
        self->state.streams.erase(it);
      },
      [=](error_event& e) {
        auto it = self->state.streams.find(e.request_id);
        if (it == self->state.streams.end()) return;
        self->send(it->second.next, std::move(e));
        self->state.streams.erase(it);
      },
  };
}

struct cut_state {
  std::unordered_map<uint64_t, filter_open> streams;
  std::unordered_map<uint64_t, bool> ended;
};

// Ends a stream ("cut") once its text holds `n` token events; drops what comes after.
filter_actor::behavior_type cut_fn(filter_actor::stateful_pointer<cut_state> self, int32_t n) {
  return {
      [=](open_atom, filter_open& f) { self->state.streams[f.context.id] = std::move(f); },
      [=](token_event& ev) {
        auto it = self->state.streams.find(ev.request_id);
        if (it == self->state.streams.end() || self->state.ended[ev.request_id]) return;
        if (ev.index + 1 == n) {
          self->state.ended[ev.request_id] = true;
          self->send(it->second.streamer, filter_end_atom::value, ev.request_id, std::string("cut"));
        }
        self->send(it->second.next, std::move(ev));
      },
      [=](done_event& d) {
        auto it = self->state.streams.find(d.request_id);
        if (it == self->state.streams.end()) return;
        if (self->state.ended[d.request_id]) d.finish_reason = "cut";
        self->send(it->second.next, std::move(d));
        self->state.streams.erase(it);
        self->state.ended.erase(d.request_id);
      },
      [=](error_event& e) {
        auto it = self->state.streams.find(e.request_id);
        if (it == self->state.streams.end()) return;
        self->send(it->second.next, std::move(e));
        self->state.streams.erase(it);
      },
  };
}

// Passes on the first `pass` token events of each stream, then holds everything of it, the
// done event included, without stopping: a filter actor that stops answering (hung on a lookup,
// a deadlock of its own), which only the streamer's deadline can tell from a slow one.
filter_actor::behavior_type mute_fn(filter_actor::stateful_pointer<route_state> self, int32_t pass) {
  return {
      [=](open_atom, filter_open& f) { self->state.streams[f.context.id] = std::move(f); },
      [=](token_event& ev) {
        auto it = self->state.streams.find(ev.request_id);
        if (it != self->state.streams.end() && ev.index < pass) self->send(it->second.next, std::move(ev));
      },
      [=](done_event&) {},
      [=](error_event& e) { self->state.streams.erase(e.request_id); },
  };
}

std::atomic<int> admitted_asks{0}, closes_seen{0};

// Refuses tenant "mallory"; counts what it admitted and what closed. `silent`: never answers.
admission_gate::behavior_type gate_fn(admission_gate::pointer self, bool silent) {
  return {
      [=](admit_atom, const admission_ask& a) -> caf::result<admission_verdict> {
        if (silent) return self->make_response_promise<admission_verdict>();  // never delivered
        if (a.tenant == "mallory") return admission_verdict::refuse(errc::rate_limited, "mallory is not welcome", 5000);
        ++admitted_asks;
        return admission_verdict::admit();
      },
      [=](closed_atom, const admission_usage&) { ++closes_seen; },
  };
}

void register_test_actors() {
  static const bool done = [] {
    auto& f = filter_actor_registry();
    f.add("test_upper", [](const option_map& o) -> result<filter_actor_spawner> {
      option_reader rd("filter actor 'test_upper'", o);
      const auto crash_after = static_cast<int32_t>(rd.integer("crash_after", 0));
      if (auto s = rd.finish(); !s) return make_error(s.error());
      return filter_actor_spawner([crash_after](caf::actor_system& sys) { return sys.spawn(upper_fn, crash_after); });
    });
    f.add("test_mute", [](const option_map& o) -> result<filter_actor_spawner> {
      option_reader rd("filter actor 'test_mute'", o);
      const auto pass = static_cast<int32_t>(rd.integer("pass", 0));
      if (auto s = rd.finish(); !s) return make_error(s.error());
      return filter_actor_spawner([pass](caf::actor_system& sys) { return sys.spawn(mute_fn, pass); });
    });
    f.add("test_cut", [](const option_map& o) -> result<filter_actor_spawner> {
      option_reader rd("filter actor 'test_cut'", o);
      const auto n = static_cast<int32_t>(rd.integer("after", 5));
      if (auto s = rd.finish(); !s) return make_error(s.error());
      return filter_actor_spawner([n](caf::actor_system& sys) { return sys.spawn(cut_fn, n); });
    });
    auto& g = admission_actor_registry();
    g.add("test_gate", [](const admission_config& c) -> result<admission_gate_spawner> {
      option_reader rd("admission actor 'test_gate'", c.policy_options);
      const bool silent = rd.boolean("silent", false);
      if (auto s = rd.finish(); !s) return make_error(s.error());
      return admission_gate_spawner([silent](caf::actor_system& sys) -> admission_gate { return sys.spawn(gate_fn, silent); });
    });
    return true;
  }();
  (void)done;
}

pipeline_config base_config() {
  register_test_actors();
  auto c = test::small_pipeline_config();
  c.cache.enabled = false;
  return c;
}

std::string upper(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

request_spec spec(const std::string& prompt, int32_t max_tokens, const std::string& tenant = {}) {
  request_spec s;
  s.prompt = prompt;
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.tenant = tenant;
  return s;
}

void expect_no_kv_leak(pipeline& p) {
  for (int i = 0; i < 200; ++i) {
    auto st = p.get_scheduler_stats();
    if (st.ok() && st->kv_blocks_available == st->kv_blocks_total && st->running == 0) return;
    std::this_thread::sleep_for(10ms);
  }
  auto st = p.get_scheduler_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->kv_blocks_available, st->kv_blocks_total);
}

}  // namespace

TEST(pipeline_actors, filter_actors_see_every_stream_in_order_and_can_end_one) {
  runtime rt;
  fake_options fo;
  fo.step_us = 200;
  auto cfg = base_config();
  // An in-process filter first, then two actors: upper-case, then cut after 12 tokens.
  cfg.streamer.filters = {{"redact", {{"words", std::vector<std::string>{"zzzz"}}}},
                          {"test_upper", {}},
                          {"test_cut", {{"after", int64_t{12}}}}};
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> streams;
  std::vector<std::string> prompts;
  for (int i = 0; i < 16; ++i) {
    prompts.push_back("prompt number " + std::to_string(i));
    streams.push_back(c.submit(spec(prompts.back(), i % 2 ? 8 : 40)));
  }
  for (int i = 0; i < 16; ++i) {
    auto out = streams[static_cast<size_t>(i)]->wait(30s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    const int32_t n = i % 2 ? 8 : 12;  // short ones finish before the cut
    EXPECT_EQ(out.text, upper(test::fake_text(fo, prompts[static_cast<size_t>(i)], n))) << i;
    EXPECT_EQ(out.finish_reason, i % 2 ? finish::length : "cut") << i;
    EXPECT_EQ(out.tokens.size(), static_cast<size_t>(n)) << i;
  }
  expect_no_kv_leak(*p);
}

TEST(pipeline_actors, a_filter_actor_that_stops_fails_its_streams_and_is_started_again) {
  runtime rt;
  fake_options fo;
  fo.step_us = 500;
  auto cfg = base_config();
  cfg.streamer.filters = {{"test_upper", {{"crash_after", int64_t{20}}}}};
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto a = c.submit(spec("first stream", 60));
  auto b = c.submit(spec("second stream", 60));
  auto ra = a->wait(30s), rb = b->wait(30s);
  for (const auto* r : {&ra, &rb}) {
    ASSERT_FALSE(r->ok());
    EXPECT_EQ(r->error.code, errc::internal);
    EXPECT_NE(r->error.message.find("output filter actor 'test_upper' stopped"), std::string::npos) << r->error.message;
  }
  expect_no_kv_leak(*p);
  // The streamer started a new one (its count of tokens starts over): the next stream is served.
  auto next = c.submit(spec("after the crash", 10))->wait(30s);
  ASSERT_TRUE(next.ok()) << next.error.message;
  EXPECT_EQ(next.text, upper(test::fake_text(fo, "after the crash", 10)));
}

TEST(pipeline_actors, a_filter_actor_that_stops_answering_fails_its_streams_by_name_after_the_deadline) {
  runtime rt;
  fake_options fo;
  fo.step_us = 500;
  auto cfg = base_config();
  cfg.streamer.filter_timeout_ms = 300;
  // The first actor answers; the second passes 5 token events per stream and then holds all.
  cfg.streamer.filters = {{"test_upper", {}}, {"test_mute", {{"pass", int64_t{5}}}}};
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  const auto t0 = std::chrono::steady_clock::now();
  // Two long streams (held while generating) and a short one (its tokens pass; its done event
  // is held after the stream closed at the streamer).
  std::vector<std::unique_ptr<stream>> streams;
  const std::vector<int32_t> lengths = {60, 60, 3};
  for (size_t i = 0; i < lengths.size(); ++i)
    streams.push_back(c.submit(spec("stream " + std::to_string(i), lengths[i])));
  for (size_t i = 0; i < streams.size(); ++i) {
    auto out = streams[i]->wait(20s);
    ASSERT_FALSE(out.ok()) << i;
    EXPECT_EQ(out.error.code, errc::internal) << i;
    EXPECT_NE(out.error.message.find("output filter actor 'test_mute' passed nothing on for"), std::string::npos)
        << out.error.message;
    EXPECT_NE(out.error.message.find("streamer.filter_timeout_ms = 300"), std::string::npos) << out.error.message;
    EXPECT_EQ(out.error.message.find("test_upper"), std::string::npos) << out.error.message;
    // What it passed on before it went quiet reached the consumer, through both actors.
    const int32_t passed = std::min<int32_t>(5, lengths[i]);
    EXPECT_EQ(out.tokens.size(), static_cast<size_t>(passed)) << i;
    EXPECT_EQ(out.text, upper(test::fake_text(fo, "stream " + std::to_string(i), passed))) << i;
  }
  // Bounded by the deadline (not the 20 s wait, nor the 30 s slow-consumer timeout).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  expect_no_kv_leak(*p);
  auto st = p->get_streamer_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->open_streams, 0);
  EXPECT_EQ(st->paused_streams, 0);
}

TEST(pipeline_actors, the_filter_deadline_bounds_each_event_not_the_stream) {
  runtime rt;
  fake_options fo;
  fo.step_us = 3000;  // 80 tokens: about 240 ms, several deadlines long
  auto cfg = base_config();
  cfg.streamer.filter_timeout_ms = 50;
  cfg.streamer.filters = {{"test_upper", {}}, {"test_cut", {{"after", int64_t{1000}}}}};
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto out = c.submit(spec("a long and healthy stream", 80))->wait(30s);
  ASSERT_TRUE(out.ok()) << out.error.message;
  EXPECT_EQ(out.text, upper(test::fake_text(fo, "a long and healthy stream", 80)));
  EXPECT_EQ(out.finish_reason, finish::length);
  expect_no_kv_leak(*p);
}

TEST(pipeline_actors, filter_actors_swap_while_serving_and_the_old_one_serves_its_streams_to_the_end) {
  runtime rt;
  fake_options fo;
  fo.step_us = 2000;
  auto cfg = base_config();
  cfg.streamer.filters = {{"test_upper", {}}};
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto running = c.submit(spec("long one", 60));
  auto first = running->next(10s);  // it is streaming through the first actor
  ASSERT_TRUE(first.has_value());
  auto next = cfg;
  next.streamer.filters = {{"test_cut", {{"after", int64_t{3}}}}};
  auto r = p->reconfigure(next, test::changed_stages(p->config(), next), 10s);
  ASSERT_TRUE(r.ok()) << r.error();
  auto fresh = c.submit(spec("new one", 60))->wait(30s);
  ASSERT_TRUE(fresh.ok()) << fresh.error.message;
  EXPECT_EQ(fresh.text, test::fake_text(fo, "new one", 3));
  EXPECT_EQ(fresh.finish_reason, "cut");
  auto old = running->wait(30s);
  ASSERT_TRUE(old.ok()) << old.error.message;
  std::string text;
  if (auto* t = std::get_if<token_event>(&*first)) text = t->text;
  EXPECT_EQ(text + old.text, upper(test::fake_text(fo, "long one", 60)));
  // A name that is neither kind is refused, naming both; an in-process filter after an actor too.
  next.streamer.filters = {{"test_uper", {}}};
  auto bad = p->reconfigure(next, test::changed_stages(p->config(), next), 10s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("unknown stream filter 'test_uper' (known filters and filter actors:"), std::string::npos)
      << bad.error();
  next.streamer.filters = {{"test_upper", {}}, {"redact", {{"words", std::vector<std::string>{"x"}}}}};
  bad = p->reconfigure(next, test::changed_stages(p->config(), next), 10s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("list the in-process filters first"), std::string::npos) << bad.error();
  expect_no_kv_leak(*p);
}

TEST(pipeline_actors, an_admission_actor_decides_and_hears_every_close_across_swaps) {
  runtime rt;
  fake_options fo;
  fo.step_us = 1000;
  auto cfg = base_config();
  cfg.admission.policy = "test_gate";
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  const int asks0 = admitted_asks, closes0 = closes_seen;
  auto refused = c.submit(spec("let me in", 5, "mallory"))->wait(10s);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error.code, errc::rate_limited);
  EXPECT_EQ(refused.error.message, "mallory is not welcome");
  EXPECT_EQ(refused.error.retry_after_ms, 5000);
  // Requests running while the policy goes actor -> token_bucket -> actor: all complete, and
  // the second actor hears the close of each admitted under the first (or under token_bucket).
  std::vector<std::unique_ptr<stream>> streams;
  std::vector<std::string> firsts;
  // Each batch is admitted (its first token arrives) before the next swap.
  auto submit = [&](int from, int to, int32_t n) {
    for (int i = from; i < to; ++i) streams.push_back(c.submit(spec("request " + std::to_string(i), n, "alice")));
    for (int i = from; i < to; ++i) {
      auto e = streams[static_cast<size_t>(i)]->next(10s);
      auto* t = e ? std::get_if<token_event>(&*e) : nullptr;
      firsts.push_back(t ? t->text : std::string("?"));
    }
  };
  submit(0, 6, 30);
  auto next = cfg;
  next.admission.policy = "token_bucket";
  ASSERT_TRUE(p->reconfigure(next, test::changed_stages(p->config(), next), 10s).ok());
  submit(6, 9, 30);
  next.admission.policy = "test_gate";
  ASSERT_TRUE(p->reconfigure(next, test::changed_stages(p->config(), next), 10s).ok());
  submit(9, 12, 5);
  for (size_t i = 0; i < streams.size(); ++i) {
    auto out = streams[i]->wait(30s);
    ASSERT_TRUE(out.ok()) << i << ": " << out.error.message;
    EXPECT_EQ(firsts[i] + out.text, test::fake_text(fo, "request " + std::to_string(i), i < 9 ? 30 : 5)) << i;
  }
  EXPECT_EQ(admitted_asks - asks0, 9);  // 6 + 3 asked an actor, 3 went through token_bucket
  for (int i = 0; i < 200 && closes_seen - closes0 < 12; ++i) std::this_thread::sleep_for(10ms);
  // The first actor heard closes until it was replaced; the last one all the rest: together 12
  // unless a request closed while token_bucket was in force (then token_bucket heard it).
  EXPECT_GE(closes_seen - closes0, 3);
  EXPECT_LE(closes_seen - closes0, 12);
  auto st = p->get_admission_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->pending, 0);
  expect_no_kv_leak(*p);
}

TEST(pipeline_actors, a_silent_admission_actor_times_out_naming_it) {
  runtime rt;
  fake_options fo;
  auto cfg = base_config();
  cfg.admission.policy = "test_gate";
  cfg.admission.policy_options = {{"silent", true}};
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  const auto t0 = std::chrono::steady_clock::now();
  auto out = c.submit(spec("anyone there?", 5))->wait(30s);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error.code, errc::internal);
  EXPECT_NE(out.error.message.find("admission actor 'test_gate' did not answer"), std::string::npos) << out.error.message;
  EXPECT_GE(waited, admission_gate_timeout - 100ms);
  auto st = p->get_admission_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->pending, 0);  // the held request is released
  // An unknown option is refused when the config is checked, naming the actor and the option.
  auto next = cfg;
  next.admission.policy_options = {{"silence", true}};
  auto bad = p->reconfigure(next, test::changed_stages(p->config(), next), 10s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("admission actor 'test_gate'"), std::string::npos) << bad.error();
  EXPECT_NE(bad.error().find("silence"), std::string::npos) << bad.error();
  next.admission.policy = "test_gat";
  next.admission.policy_options = {};
  bad = p->reconfigure(next, test::changed_stages(p->config(), next), 10s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("unknown admission policy 'test_gat' (known policies and actors:"), std::string::npos)
      << bad.error();
  EXPECT_NE(bad.error().find("test_gate"), std::string::npos) << bad.error();
  EXPECT_NE(bad.error().find("token_bucket"), std::string::npos) << bad.error();
}

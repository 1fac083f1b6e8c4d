// streamer_state driven directly: detokenization, stop strings with hold-back, flow control
// (pause when the buffer fills, resume at half), slow consumers, cancel, cache replay.
#include "actors/streamer/streamer_state.hpp"

#include <gtest/gtest.h>

using namespace troupe;
using namespace troupe::actors;

namespace {

stream_open open_msg(uint64_t id, std::vector<std::string> stop = {}) {
  stream_open o;
  o.id = id;
  o.arrival_us = 1000;
  o.prompt_tokens = 7;
  o.stop = std::move(stop);
  return o;
}

step_output toks(uint64_t id, const std::string& text) {
  step_output o;
  for (unsigned char c : text) o.tokens.push_back({id, c, -0.5f, {}});
  return o;
}

step_output fin(uint64_t id, const std::string& reason) {
  step_output o;
  seq_finished f;
  f.id = id;
  f.reason = reason;
  f.usage.cached_prompt_tokens = 3;
  f.usage.speculative_proposed = 6;
  f.usage.speculative_accepted = 4;
  f.queue_ms = 1.5;
  o.finished.push_back(f);
  return o;
}

struct collected {
  std::string text;
  std::vector<token_event> tokens;
  std::vector<done_event> done;
  std::vector<error_event> errors;
};

collected collect(const streamer_effects& fx) {
  collected c;
  for (const auto& e : fx.events) {
    if (auto* t = std::get_if<token_event>(&e)) {
      c.tokens.push_back(*t);
      c.text += t->text;
    } else if (auto* d = std::get_if<done_event>(&e)) {
      c.done.push_back(*d);
      c.text += d->text;
    } else {
      c.errors.push_back(std::get<error_event>(e));
    }
  }
  return c;
}

}  // namespace

TEST(streamer_state, tokens_become_text_and_done_carries_usage) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1));
  s.on_output(toks(1, "hello"), 2000);
  s.on_output(fin(1, finish::length), 5000);
  auto fx = s.take_effects();
  auto c = collect(fx);
  EXPECT_EQ(c.text, "hello");
  ASSERT_EQ(c.tokens.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c.tokens[static_cast<size_t>(i)].index, i);
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].finish_reason, finish::length);
  EXPECT_EQ(c.done[0].usage.prompt_tokens, 7);
  EXPECT_EQ(c.done[0].usage.completion_tokens, 5);
  EXPECT_EQ(c.done[0].usage.cached_prompt_tokens, 3);
  EXPECT_EQ(c.done[0].usage.speculative_proposed, 6);  // the scheduler's counts reach the done event
  EXPECT_EQ(c.done[0].usage.speculative_accepted, 4);
  EXPECT_DOUBLE_EQ(c.done[0].timings.ttft_ms, 1.0);
  EXPECT_DOUBLE_EQ(c.done[0].timings.total_ms, 4.0);
  ASSERT_EQ(fx.closed.size(), 1u);
  EXPECT_EQ(fx.closed[0].tokens.size(), 5u);
  EXPECT_FALSE(s.is_open(1));
}

TEST(streamer_state, utf8_is_held_until_complete) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1));
  s.on_output(toks(1, "a\xC3"), 1);  // 'a' then the first byte of 'é'
  auto c = collect(s.take_effects());
  EXPECT_EQ(c.text, "a");
  s.on_output(toks(1, "\xA9"), 2);
  c = collect(s.take_effects());
  EXPECT_EQ(c.text, "\xC3\xA9");
}

TEST(streamer_state, stop_string_is_held_back_and_never_leaks) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1, {"END"}));
  s.on_output(toks(1, "abcEN"), 1);
  auto fx = s.take_effects();
  auto c = collect(fx);
  EXPECT_EQ(c.text, "abc");  // "EN" could start the stop string
  EXPECT_TRUE(fx.drop.empty());
  s.on_output(toks(1, "Dxyz"), 2);
  fx = s.take_effects();
  c = collect(fx);
  EXPECT_EQ(c.text, "");
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].finish_reason, finish::stop);
  EXPECT_EQ(c.done[0].usage.completion_tokens, 6);  // through the token that completed "END"
  ASSERT_EQ(fx.drop.size(), 1u);                    // the scheduler forgets the sequence
  EXPECT_EQ(fx.drop[0], 1u);
  // Later tokens and the scheduler's own finish are ignored.
  s.on_output(toks(1, "more"), 3);
  s.on_output(fin(1, finish::length), 3);
  EXPECT_TRUE(s.take_effects().events.empty());
}

// A stream the streamer ends itself (here a stop string) reports the scheduler's figures that
// came with its last token: cached prompt tokens, speculation, queue time, preemptions.
TEST(streamer_state, a_stream_ended_here_keeps_the_scheduler_s_figures) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1, {"END"}));
  step_output o = toks(1, "abEND");
  for (size_t i = 0; i < o.tokens.size(); ++i) {
    auto& f = o.tokens[i].so_far;
    f.usage.cached_prompt_tokens = 3;
    f.usage.speculative_proposed = 4 + static_cast<int32_t>(i);
    f.usage.speculative_accepted = 2 + static_cast<int32_t>(i);
    f.queue_ms = 1.5;
    f.preemptions = 1;
  }
  s.on_output(o, 2000);
  auto c = collect(s.take_effects());
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].finish_reason, finish::stop);
  EXPECT_EQ(c.done[0].usage.completion_tokens, 5);
  EXPECT_EQ(c.done[0].usage.cached_prompt_tokens, 3);
  EXPECT_EQ(c.done[0].usage.speculative_proposed, 8);
  EXPECT_EQ(c.done[0].usage.speculative_accepted, 6);
  EXPECT_DOUBLE_EQ(c.done[0].timings.queue_ms, 1.5);
  EXPECT_EQ(c.done[0].timings.preemptions, 1);

  // A cancel too.
  s.open(open_msg(2));
  step_output t = toks(2, "ab");
  for (auto& x : t.tokens) x.so_far.usage.speculative_proposed = 9;
  s.on_output(t, 3000);
  s.take_effects();
  s.cancel(2, 4000);
  auto cc = collect(s.take_effects());
  ASSERT_EQ(cc.done.size(), 1u);
  EXPECT_EQ(cc.done[0].usage.speculative_proposed, 9);
  EXPECT_EQ(cc.done[0].usage.completion_tokens, 2);
}

TEST(streamer_state, held_back_text_is_released_at_the_end) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1, {"END"}));
  s.on_output(toks(1, "abE"), 1);
  s.on_output(fin(1, finish::length), 2);
  auto c = collect(s.take_effects());
  EXPECT_EQ(c.text, "abE");
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].text, "E");
}

TEST(streamer_state, full_buffer_pauses_and_half_empty_resumes) {
  streamer_config cfg;
  cfg.buffer_tokens = 4;
  cfg.slow_consumer_timeout_ms = 1000;
  streamer_state s(cfg, make_byte_codec());
  s.open(open_msg(1));
  s.on_output(toks(1, "abc"), 1);
  auto fx = s.take_effects();
  EXPECT_EQ(collect(fx).tokens.size(), 3u);
  EXPECT_TRUE(fx.pause.empty());
  s.on_output(toks(1, "defg"), 2);
  fx = s.take_effects();
  EXPECT_EQ(collect(fx).tokens.size(), 1u);  // 'd'; e, f, g wait here
  ASSERT_EQ(fx.pause.size(), 1u);
  ASSERT_EQ(fx.slow_checks.size(), 1u);
  EXPECT_EQ(s.stats().paused_streams, 1);
  s.on_ack(1, 2, 3);  // consumer took a, b: e, f go out; 4 + 1 buffered, still paused
  fx = s.take_effects();
  EXPECT_EQ(collect(fx).text, "ef");
  EXPECT_TRUE(fx.resume.empty());
  s.on_ack(1, 4, 4);  // took c..f: g goes out, 1 unacknowledged <= 2
  fx = s.take_effects();
  EXPECT_EQ(collect(fx).text, "g");
  ASSERT_EQ(fx.resume.size(), 1u);
  // A stale timer does nothing.
  s.check_slow(1, fx.slow_checks.empty() ? 1 : fx.slow_checks[0].second, 5);
  EXPECT_TRUE(s.take_effects().events.empty());
  EXPECT_TRUE(s.is_open(1));
}

TEST(streamer_state, done_waits_behind_buffered_tokens) {
  streamer_config cfg;
  cfg.buffer_tokens = 2;
  streamer_state s(cfg, make_byte_codec());
  s.open(open_msg(1));
  s.on_output(toks(1, "abcd"), 1);
  s.on_output(fin(1, finish::length), 1);
  auto c = collect(s.take_effects());
  EXPECT_EQ(c.text, "ab");
  EXPECT_TRUE(c.done.empty());
  s.on_ack(1, 2, 2);
  c = collect(s.take_effects());
  EXPECT_EQ(c.text, "cd");
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_FALSE(s.is_open(1));
}

TEST(streamer_state, slow_consumer_ends_the_stream) {
  streamer_config cfg;
  cfg.buffer_tokens = 2;
  cfg.slow_consumer_timeout_ms = 100;
  streamer_state s(cfg, make_byte_codec());
  s.open(open_msg(1));
  s.on_output(toks(1, "abcd"), 1);
  auto fx = s.take_effects();
  ASSERT_EQ(fx.slow_checks.size(), 1u);
  s.check_slow(1, fx.slow_checks[0].second, 200'000);
  fx = s.take_effects();
  auto c = collect(fx);
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].finish_reason, finish::slow_consumer);
  // Two tokens went out before the buffer filled; the two behind them were never sent, and
  // the completion counts what its reader got.
  EXPECT_EQ(c.done[0].usage.completion_tokens, 2);
  ASSERT_EQ(fx.closed.size(), 1u);
  EXPECT_EQ(fx.closed[0].tokens.size(), 2u);
  ASSERT_EQ(fx.drop.size(), 1u);
  EXPECT_EQ(s.stats().slow_consumers, 1);
  EXPECT_FALSE(s.is_open(1));
}

TEST(streamer_state, cancel_ends_at_once_and_drops_the_sequence) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1));
  s.on_output(toks(1, "ab"), 1);
  s.take_effects();
  s.cancel(1, 2);
  auto fx = s.take_effects();
  auto c = collect(fx);
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].finish_reason, finish::cancelled);
  EXPECT_EQ(fx.drop, std::vector<uint64_t>{1});
  ASSERT_EQ(fx.closed.size(), 1u);
  EXPECT_EQ(fx.closed[0].finish_reason, finish::cancelled);
}

TEST(streamer_state, failure_becomes_an_error_event) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1));
  step_output o;
  o.failed.push_back({1, errc::executor_fault, "boom"});
  s.on_output(o, 1);
  auto fx = s.take_effects();
  auto c = collect(fx);
  ASSERT_EQ(c.errors.size(), 1u);
  EXPECT_EQ(c.errors[0].code, errc::executor_fault);
  ASSERT_EQ(fx.closed.size(), 1u);
  EXPECT_TRUE(fx.closed[0].finish_reason.empty());
}

TEST(streamer_state, replay_streams_cached_tokens) {
  streamer_state s({}, make_byte_codec());
  s.open(open_msg(1, {"c"}));
  cache_replay r;
  r.id = 1;
  for (char ch : std::string("abcd")) r.tokens.push_back(ch);
  r.finish_reason = finish::length;
  s.on_replay(r, 10);
  auto fx = s.take_effects();
  auto c = collect(fx);
  EXPECT_EQ(c.text, "ab");
  ASSERT_EQ(c.done.size(), 1u);
  EXPECT_EQ(c.done[0].finish_reason, finish::stop);
  EXPECT_TRUE(c.done[0].cached);
  EXPECT_TRUE(fx.drop.empty());
  ASSERT_EQ(fx.closed.size(), 1u);
  EXPECT_TRUE(fx.closed[0].cached);
}

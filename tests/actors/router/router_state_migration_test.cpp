// router_state when a replica dies (a kill or silence past dead_after_ms) or loses its requests,
// driven directly with injected time: request migration with exactly the delivered tokens, stale
// outputs of a replica that no longer owns a request, usage of a migrated request's finish, and
// failures when no replica is left.
#include <gtest/gtest.h>

#include "actors/router/router_state.hpp"
#include "tests/actors/router/router_state_harness.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::router_test;

TEST(RouterState, KillMigratesWithExactlyTheDeliveredTokens) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  const auto prompt = tokens(1, 40);
  auto req = request(7, prompt, 10);
  req.priority = 3;
  req.stop = {"END"};
  s.enqueue(req, 0);
  EXPECT_EQ(placed_on(s), 1u);
  s.on_output(1, tokens_out(7, {101, 102, 103}));
  auto fx = s.take_effects();
  ASSERT_EQ(fx.to_streamer.tokens.size(), 3u);

  s.kill(1, "connection lost", 5 * ms);
  fx = s.take_effects();
  ASSERT_EQ(fx.place.size(), 1u);
  EXPECT_EQ(fx.place[0].first, 2u);
  const admitted_request& c = fx.place[0].second;
  EXPECT_EQ(c.id, 7u);
  auto expect_prompt = prompt;
  expect_prompt.insert(expect_prompt.end(), {101, 102, 103});
  EXPECT_EQ(c.prompt, expect_prompt);
  EXPECT_EQ(c.max_tokens, 7);
  EXPECT_EQ(c.generated_before, 3);
  EXPECT_EQ(c.sampling.seed, 42u);
  EXPECT_EQ(c.priority, 3);
  EXPECT_EQ(c.stop, req.stop);
  EXPECT_TRUE(fx.to_streamer.empty());  // the client sees nothing of the move
  EXPECT_TRUE(has_line(fx.log, "request 7 moved from replica 1 to 2 after 3 tokens")) << fx.log.size();
  EXPECT_TRUE(has_line(fx.log, "replica 1 (a) is dead (connection lost)"));
  auto st = s.stats();
  EXPECT_EQ(st.migrations, 1);
  EXPECT_EQ(st.replica_deaths, 1);
  EXPECT_EQ(stats_of(st, 1)->state, "dead");
  EXPECT_EQ(stats_of(st, 1)->in_flight, 0);
  EXPECT_EQ(stats_of(st, 2)->in_flight, 1);
  EXPECT_EQ(stats_of(st, 2)->placed, 1);
}

// The local scheduler crashed and was restarted: the replica lives on, and each of its requests
// is placed again as the continuation after the tokens already delivered.
TEST(RouterState, ARestartedReplicasRequestsContinueAfterTheDeliveredTokens) {
  router_state s(config("round_robin"), make_policy("round_robin"));
  s.add_local(block, 0);
  const auto prompt = tokens(1, 20);
  s.enqueue(request(7, prompt, 10), 0);
  s.enqueue(request(8, tokens(50, 5), 2), 0);
  auto fx = s.take_effects();
  ASSERT_EQ(fx.place.size(), 2u);
  s.on_output(0, tokens_out(7, {101, 102}));
  s.on_output(0, tokens_out(8, {201, 202}));  // everything of request 8 but its finish
  (void)s.take_effects();

  s.restarted(0, "the scheduler failed", 5 * ms);
  fx = s.take_effects();
  ASSERT_EQ(fx.place.size(), 1u);
  EXPECT_EQ(fx.place[0].first, 0u);
  const admitted_request& c = fx.place[0].second;
  EXPECT_EQ(c.id, 7u);
  auto expect_prompt = prompt;
  expect_prompt.insert(expect_prompt.end(), {101, 102});
  EXPECT_EQ(c.prompt, expect_prompt);
  EXPECT_EQ(c.max_tokens, 8);
  EXPECT_EQ(c.generated_before, 2);
  ASSERT_EQ(fx.to_streamer.finished.size(), 1u);  // request 8 had all its tokens: it finishes here
  EXPECT_EQ(fx.to_streamer.finished[0].id, 8u);
  EXPECT_EQ(fx.to_streamer.finished[0].reason, finish::length);
  EXPECT_TRUE(fx.to_streamer.failed.empty());
  EXPECT_TRUE(has_line(fx.log, "lost its requests (the scheduler failed)")) << fx.log.size();
  auto st = s.stats();
  EXPECT_EQ(st.replica_deaths, 0);
  EXPECT_EQ(stats_of(st, 0)->state, "ready");
  EXPECT_EQ(stats_of(st, 0)->in_flight, 1);
  // The continuation's output passes on after what was delivered.
  s.on_output(0, tokens_out(7, {103}));
  fx = s.take_effects();
  ASSERT_EQ(fx.to_streamer.tokens.size(), 1u);
  EXPECT_EQ(fx.to_streamer.tokens[0].token, 103);
}

TEST(RouterState, StaleOutputsOfADeadReplicaAreDroppedNeverPassedOn) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(7, tokens(1, 40), 10), 0);
  EXPECT_EQ(placed_on(s), 1u);
  s.on_output(1, tokens_out(7, {101, 102}));
  std::vector<int32_t> seen;
  for (const auto& t : s.take_effects().to_streamer.tokens) seen.push_back(t.token);
  s.kill(1, "silent", 0);
  (void)s.take_effects();

  // The dead replica was only partitioned: its late tokens and finish arrive.
  step_output late = tokens_out(7, {103, 104});
  late.finished.push_back(finished_out(7, finish::length, 40, 10).finished[0]);
  s.on_output(1, late);
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.to_streamer.empty());
  ASSERT_EQ(fx.drop.size(), 1u);  // once per id
  EXPECT_EQ(fx.drop[0], (std::pair<uint64_t, uint64_t>{1, 7}));
  EXPECT_EQ(s.stats().stale_outputs, 3);
  // A report from it does not bring it back.
  s.on_report(1, load_report{}, 10);
  EXPECT_FALSE(s.live(1));

  // The new owner's tokens continue the stream: no gap, no duplicate.
  s.on_output(2, tokens_out(7, {103, 104}));
  for (const auto& t : s.take_effects().to_streamer.tokens) seen.push_back(t.token);
  EXPECT_EQ(seen, (std::vector<int32_t>{101, 102, 103, 104}));
  auto st = s.stats();
  EXPECT_EQ(stats_of(st, 1)->tokens, 2);
  EXPECT_EQ(stats_of(st, 2)->tokens, 2);
}

TEST(RouterState, AMigratedRequestsFinishReportsTheOriginalPromptAndEveryToken) {
  // The new replica may report the continuation's own view (prompt with the moved tokens) or
  // count generated_before itself: the streamer sees the whole request's usage either way.
  for (bool counts_generated_before : {false, true}) {
    router_state s(config("round_robin", false), make_policy("round_robin"));
    s.add_replica("a", block, 0);
    s.add_replica("b", block, 0);
    s.enqueue(request(7, tokens(1, 40), 10), 0);
    (void)s.take_effects();
    s.on_output(1, tokens_out(7, {101, 102, 103}));
    s.kill(1, "connection lost", 0);
    (void)s.take_effects();
    step_output o = tokens_out(7, {104, 105});
    o.finished.push_back(counts_generated_before ? finished_out(7, finish::stop, 40, 5).finished[0]
                                                 : finished_out(7, finish::stop, 43, 2).finished[0]);
    s.on_output(2, o);
    auto fx = s.take_effects();
    ASSERT_EQ(fx.to_streamer.finished.size(), 1u);
    EXPECT_EQ(fx.to_streamer.finished[0].usage.prompt_tokens, 40);
    EXPECT_EQ(fx.to_streamer.finished[0].usage.completion_tokens, 5);
    const auto st = s.stats();
    EXPECT_EQ(stats_of(st, 2)->in_flight, 0);
  }
}

TEST(RouterState, PauseIsCarriedOverToTheNewReplica) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.add_replica("c", block, 0);
  s.enqueue(request(7, tokens(1, 40), 10), 0);
  s.enqueue(request(8, tokens(1, 40), 10), 0);
  (void)s.take_effects();  // 7 on a, 8 on b
  s.pause(7);
  auto fx = s.take_effects();
  ASSERT_EQ(fx.pause.size(), 1u);
  EXPECT_EQ(fx.pause[0], (std::pair<uint64_t, uint64_t>{1, 7}));

  s.kill(1, "connection lost", 0);
  fx = s.take_effects();
  ASSERT_EQ(fx.place.size(), 1u);
  const uint64_t to = fx.place[0].first;
  EXPECT_NE(to, 1u);
  ASSERT_EQ(fx.pause.size(), 1u);
  EXPECT_EQ(fx.pause[0], (std::pair<uint64_t, uint64_t>{to, 7}));

  // Resumed later: on the new replica.
  s.resume(7);
  fx = s.take_effects();
  ASSERT_EQ(fx.resume.size(), 1u);
  EXPECT_EQ(fx.resume[0], (std::pair<uint64_t, uint64_t>{to, 7}));
  // Resumed before a second move: no pause follows that place.
  s.kill(to, "connection lost", 0);
  fx = s.take_effects();
  ASSERT_EQ(fx.place.size(), 1u);
  EXPECT_TRUE(fx.pause.empty());
}

TEST(RouterState, AKillAfterTheLastTokenFinishesInsteadOfMoving) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(7, tokens(1, 20), 3), 0);
  auto eog = request(8, tokens(1, 20), 10);
  eog.eog = {2};
  s.enqueue(eog, 0);
  (void)s.take_effects();  // 7 on a, 8 on b
  s.on_output(1, tokens_out(7, {5, 6, 7}));   // max_tokens reached; the finish was lost
  s.on_output(2, tokens_out(8, {9, 2}));      // an end-of-generation token; the finish was lost
  (void)s.take_effects();
  s.kill(1, "connection lost", 0);
  s.kill(2, "connection lost", 0);
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.place.empty());
  EXPECT_TRUE(fx.to_streamer.failed.empty());
  ASSERT_EQ(fx.to_streamer.finished.size(), 2u);
  EXPECT_EQ(fx.to_streamer.finished[0].id, 7u);
  EXPECT_EQ(fx.to_streamer.finished[0].reason, finish::length);
  EXPECT_EQ(fx.to_streamer.finished[0].usage.prompt_tokens, 20);
  EXPECT_EQ(fx.to_streamer.finished[0].usage.completion_tokens, 3);
  EXPECT_EQ(fx.to_streamer.finished[1].id, 8u);
  EXPECT_EQ(fx.to_streamer.finished[1].reason, finish::stop);
  EXPECT_EQ(s.stats().migrations, 0);
}

TEST(RouterState, NoReplicaLeftFailsRunningStreamsNamingTheCause) {
  router_state s(config("least_loaded", false), make_policy("least_loaded"));
  s.add_replica("w1", block, 0);
  s.enqueue(request(7, tokens(1, 20), 10), 0);
  (void)s.take_effects();
  s.on_output(1, tokens_out(7, {5}));
  (void)s.take_effects();
  s.kill(1, "connection lost", 0);
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.place.empty());
  ASSERT_EQ(fx.to_streamer.failed.size(), 1u);
  EXPECT_EQ(fx.to_streamer.failed[0].id, 7u);
  EXPECT_EQ(fx.to_streamer.failed[0].code, errc::no_replica);
  const auto& m = fx.to_streamer.failed[0].message;
  EXPECT_NE(m.find("replica 1 (w1)"), std::string::npos) << m;
  EXPECT_NE(m.find("connection lost"), std::string::npos) << m;
  auto st = s.stats();
  EXPECT_EQ(st.refused_no_replica, 1);
  EXPECT_EQ(st.migrations, 0);
  // The request is gone: a late drop from the streamer is nothing to pass on.
  s.drop(7);
  EXPECT_TRUE(s.take_effects().drop.empty());
}

TEST(RouterState, ExpireKillsReplicasSilentPastDeadAfterButNeverTheLocalOne) {
  router_state s(config("least_loaded"), make_policy("least_loaded"));
  s.add_local(block, 0);
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(7, tokens(1, 20), 10), 0);
  s.enqueue(request(8, tokens(1, 20), 10), 0);
  s.enqueue(request(9, tokens(1, 20), 10), 0);
  (void)s.take_effects();  // one on each
  s.on_report(1, load_report{}, 1000 * ms);
  s.on_report(2, load_report{}, 2000 * ms);
  // a last reported at 1 s: silent exactly dead_after_ms is still alive.
  EXPECT_TRUE(s.expire(4000 * ms).empty());
  EXPECT_EQ(s.expire(4000 * ms + 1), (std::vector<uint64_t>{1}));
  EXPECT_FALSE(s.live(1));
  auto fx = s.take_effects();
  ASSERT_EQ(fx.place.size(), 1u);  // a's request moved
  EXPECT_NE(fx.place[0].first, 1u);
  EXPECT_TRUE(has_line(fx.log, "cluster.dead_after_ms = 3000"));
  // Much later: b dies too, the local replica (never reporting here) stays.
  EXPECT_EQ(s.expire(60000 * ms), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(s.live(0));
  EXPECT_EQ(s.live_count(), 1u);
  EXPECT_EQ(s.stats().replica_deaths, 2);
  EXPECT_EQ(s.stats().migrations, 2);
}

// router_state, driven directly with injected time: placement per policy, the prefix summary,
// draining, flow control and outputs for the replica that owns a request, failures when there is
// no replica for a new one, who may join, and what /health and /metrics are told. A replica's
// death and the migration of its requests: router_state_migration_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "actors/router/router_state.hpp"
#include "tests/actors/router/router_state_harness.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::router_test;

TEST(RouterState, ReplicaIdsStartAtOneAndAreNeverReused) {
  router_state s(config("least_loaded"), make_policy("least_loaded"));
  s.add_local(block, 0);
  EXPECT_EQ(s.add_replica("a", block, 0), 1u);
  EXPECT_EQ(s.add_replica("b", block, 0), 2u);
  s.kill(1, "connection lost", 0);
  EXPECT_EQ(s.add_replica("a", block, 0), 3u);  // the same worker rejoining is a new replica
  EXPECT_TRUE(s.live(0));
  EXPECT_FALSE(s.live(1));
  EXPECT_TRUE(s.live(2));
  EXPECT_TRUE(s.live(3));
  EXPECT_FALSE(s.live(9));
  EXPECT_EQ(s.live_count(), 3u);
  auto st = s.stats();
  ASSERT_EQ(st.replicas.size(), 4u);  // dead ones included
  EXPECT_EQ(stats_of(st, 0)->name, "local");
  EXPECT_EQ(stats_of(st, 1)->state, "dead");
  EXPECT_EQ(stats_of(st, 2)->state, "ready");
  EXPECT_EQ(st.policy, "least_loaded");
}

// Two live workers of one name make logs, /health and a reload's not_applied_on_workers
// ambiguous: the join of a second is logged with the first's id (while it lives, draining too;
// a replacement may come before the old one's death is noticed, so it is not refused).
TEST(RouterState, ANameTakenByALiveWorkerIsSaid) {
  router_state s(config("least_loaded"), make_policy("least_loaded"));
  s.add_local(block, 0);
  EXPECT_EQ(s.name_conflict("w1"), "");
  s.add_replica("w1", block, 0);
  EXPECT_NE(s.name_conflict("w1").find("a live replica is named 'w1' already (replica 1)"), std::string::npos);
  EXPECT_EQ(s.name_conflict("w2"), "");
  EXPECT_EQ(s.name_conflict(""), "") << "no name, nothing to confuse";
  s.drain(1);
  EXPECT_NE(s.name_conflict("w1"), "") << "draining is still live";
  s.kill(1, "connection lost", 0);
  EXPECT_EQ(s.name_conflict("w1"), "") << "the same worker rejoining after its death";
  const uint64_t again = s.add_replica("w1", block, 0);
  EXPECT_NE(s.name_conflict("w1").find("(replica " + std::to_string(again) + ")"), std::string::npos);
  EXPECT_NE(s.add_replica("w1", block, 0), again) << "a second of the name joins all the same (logged)";
  EXPECT_TRUE(s.live(again));
}

// Workers' KV memory may differ (kv.memory_mib is no join key): a request goes only where its
// whole KV fits. A small replica refused such requests at once (a 400 to the client) and, so
// looking idle, drew most of them under least_loaded; none fitting is kv_capacity, naming sizes.
TEST(RouterState, ARequestGoesOnlyWhereItsKvFits) {
  for (const char* policy : {"least_loaded", "round_robin", "prefix_affinity"}) {
    router_state s(config(policy, false), make_policy(policy));
    s.add_local(block, 0);
    const uint64_t small = s.add_replica("small", block, 0), big = s.add_replica("big", block, 0);
    load_report r;
    r.kv_blocks_total = r.kv_blocks_available = 22;  // 352 token slots
    s.on_report(small, r, 0);
    r.kv_blocks_total = r.kv_blocks_available = 4000;
    r.running = 8;  // busier: least_loaded would pick the small one
    s.on_report(big, r, 0);
    for (uint64_t id = 1; id <= 6; ++id) {
      s.enqueue(request(id, tokens(1, 100), 400), 0);  // 500 tokens: only `big` holds them
      EXPECT_EQ(placed_on(s), big) << policy;
    }
    s.enqueue(request(7, tokens(1, 100), 100), 0);  // fits both
    EXPECT_TRUE(s.take_effects().to_streamer.failed.empty()) << policy;
    s.enqueue(request(8, tokens(1, 100), 70000), 0);
    auto fx = s.take_effects();
    ASSERT_EQ(fx.to_streamer.failed.size(), 1u) << policy;
    EXPECT_EQ(fx.to_streamer.failed[0].code, errc::kv_capacity);
    EXPECT_NE(fx.to_streamer.failed[0].message.find("the largest holds 64000 token slots"), std::string::npos)
        << fx.to_streamer.failed[0].message;
  }
}

TEST(RouterState, RoundRobinPlacesInTurn) {
  router_state s(config("round_robin"), make_policy("round_robin"));
  s.add_local(block, 0);
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  std::vector<uint64_t> got;
  for (uint64_t id = 1; id <= 6; ++id) {
    s.enqueue(request(id, tokens(1, 20), 8), 0);
    got.push_back(placed_on(s));
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 0, 1, 2}));
  auto st = s.stats();
  EXPECT_EQ(st.placed, 6);
  for (uint64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(stats_of(st, r)->placed, 2);
    EXPECT_EQ(stats_of(st, r)->in_flight, 2);
  }
}

TEST(RouterState, LeastLoadedFollowsTheRoutersOwnQueuedTokens) {
  router_state s(config("least_loaded", false), make_policy("least_loaded"));
  s.add_local(block, 0);
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(1, tokens(1, 500), 100), 0);  // 600 tokens
  EXPECT_EQ(placed_on(s), 1u);
  s.enqueue(request(2, tokens(1, 100), 100), 0);  // 200 tokens
  EXPECT_EQ(placed_on(s), 2u);
  s.enqueue(request(3, tokens(1, 100), 100), 0);  // b has 200 < 600
  EXPECT_EQ(placed_on(s), 2u);
  s.enqueue(request(4, tokens(1, 100), 100), 0);  // b has 400 < 600
  EXPECT_EQ(placed_on(s), 2u);
  // Tokens delivered from a count down; finishes free the rest: a has 0 left, b has 600.
  s.on_output(1, tokens_out(1, {7, 8, 9}));
  s.on_output(1, finished_out(1, finish::stop, 500, 3));
  (void)s.take_effects();
  s.enqueue(request(5, tokens(1, 100), 100), 0);
  EXPECT_EQ(placed_on(s), 1u);
  auto st = s.stats();
  EXPECT_EQ(stats_of(st, 1)->in_flight, 1);
  EXPECT_EQ(stats_of(st, 2)->in_flight, 3);
  EXPECT_EQ(stats_of(st, 1)->tokens, 3);
}

TEST(RouterState, LeastLoadedBreaksTiesByReportedLoad) {
  router_state s(config("least_loaded", false), make_policy("least_loaded"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  load_report busy;
  busy.waiting = 3;
  busy.running = 4;
  s.on_report(1, busy, 10);
  s.on_report(2, load_report{}, 10);
  s.enqueue(request(1, tokens(1, 10), 10), 20);
  EXPECT_EQ(placed_on(s), 2u);
}

TEST(RouterState, PrefixAffinitySendsRepeatedPrefixesToTheReplicaHoldingThem) {
  router_state s(config("prefix_affinity", false), make_policy("prefix_affinity"));
  s.add_local(block, 0);
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  const auto system = tokens(1000, 4 * block);  // a shared system prompt of 4 whole blocks
  const auto with_system = [&](int32_t user) {
    auto p = system;
    auto u = tokens(user, 10);
    p.insert(p.end(), u.begin(), u.end());
    return p;
  };
  s.enqueue(request(1, with_system(1), 50), 0);
  EXPECT_EQ(placed_on(s), 1u);  // no hit anywhere: the least loaded, smallest id
  s.enqueue(request(2, tokens(5000, 40), 50), 0);
  EXPECT_EQ(placed_on(s), 2u);  // no hit: b is less loaded now
  // The same system prompt again, although a carries more: a holds its blocks.
  for (uint64_t id = 3; id <= 6; ++id) {
    s.enqueue(request(id, with_system(static_cast<int32_t>(id * 100)), 50), 0);
    EXPECT_EQ(placed_on(s), 1u) << id;
  }
  // A prompt that shares half its blocks still goes where they are (min_hit_ratio 0.5)...
  auto half = tokens(1000, 2 * block);
  auto rest = tokens(9000, 2 * block);
  half.insert(half.end(), rest.begin(), rest.end());
  s.enqueue(request(7, half, 50), 0);
  EXPECT_EQ(placed_on(s), 1u);
  // ...one that shares a quarter (as every chat shares its template's opening) goes by load.
  auto quarter = tokens(1000, block);
  auto more = tokens(7000, 3 * block);
  quarter.insert(quarter.end(), more.begin(), more.end());
  s.enqueue(request(8, quarter, 50), 0);
  EXPECT_EQ(placed_on(s), 2u);
}

TEST(RouterState, PrefixAffinityFallsBackToLeastLoadedPastTheImbalance) {
  routing_options o;
  o.values["max_imbalance"] = 300;
  o.values["balance_ratio"] = 1.5;
  router_state s(config("prefix_affinity", false), make_policy("prefix_affinity", o));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  const auto prompt = tokens(1000, 4 * block);
  s.enqueue(request(1, prompt, 200), 0);  // a: 264 queued
  EXPECT_EQ(placed_on(s), 1u);
  s.enqueue(request(2, prompt, 200), 0);  // a holds the prefix; 264 over b is within 300
  EXPECT_EQ(placed_on(s), 1u);
  s.enqueue(request(3, prompt, 200), 0);  // a has 528 queued against b's 0: balance wins
  EXPECT_EQ(placed_on(s), 2u);
  s.enqueue(request(4, prompt, 200), 0);  // both hold it now: the less loaded, b
  EXPECT_EQ(placed_on(s), 2u);
}

TEST(RouterState, PrefixAffinityHitsMoreThanRoundRobin) {
  // 7 conversations with their own 8-block system prompts, 64 requests arriving interleaved, on 4
  // replicas: count requests placed where their prefix already was.
  const auto run = [](const std::string& policy) {
    router_state s(config(policy, false), make_policy(policy));
    for (int i = 0; i < 4; ++i) s.add_replica("w" + std::to_string(i), block, 0);
    std::map<uint64_t, std::set<int>> holds;  // replica -> conversations sent there
    int hits = 0;
    for (uint64_t id = 1; id <= 64; ++id) {
      const int conv = static_cast<int>((id * 3) % 7);
      auto p = tokens(10000 * (conv + 1), 8 * block);
      auto u = tokens(static_cast<int32_t>(id) * 7, 12);
      p.insert(p.end(), u.begin(), u.end());
      s.enqueue(request(id, p, 16), 0);
      auto fx = s.take_effects();
      const uint64_t r = fx.place.at(0).first;
      hits += holds[r].count(conv) ? 1 : 0;
      holds[r].insert(conv);
      s.on_output(r, finished_out(id, finish::stop, static_cast<int32_t>(p.size()), 0));
      (void)s.take_effects();
    }
    return hits;
  };
  const int affinity = run("prefix_affinity");
  const int rr = run("round_robin");
  EXPECT_EQ(affinity, 64 - 7);  // every conversation's first request is its only miss
  EXPECT_LT(rr, affinity);
}

TEST(RouterState, PrefixSummaryIsBoundedAndForgetsTheOldest) {
  const auto scenario = [](bool flood) {
    router_state s(config("prefix_affinity", false), make_policy("prefix_affinity"));
    s.add_replica("a", block, 0);
    s.add_replica("b", block, 0);
    const auto prompt = tokens(1, 4 * block);
    s.enqueue(request(1, prompt, 10), 0);
    EXPECT_EQ(placed_on(s), 1u);
    s.on_output(1, finished_out(1, finish::stop, 64, 0));
    if (flood) {  // 5000 other blocks through a: more than it remembers
      s.enqueue(request(2, tokens(100000, 5000 * block), 10), 0);
      EXPECT_EQ(placed_on(s), 1u);
      s.on_output(1, finished_out(2, finish::stop, 5000 * block, 0));
    }
    s.enqueue(request(3, tokens(900000, 20), 10), 0);  // a little load on a
    EXPECT_EQ(placed_on(s), 1u);
    s.enqueue(request(4, prompt, 10), 0);
    return placed_on(s);
  };
  EXPECT_EQ(scenario(false), 1u);  // a still holds the prompt's blocks
  EXPECT_EQ(scenario(true), 2u);   // forgotten: the least loaded
}

TEST(RouterState, OutputsOfOwnedRequestsPassOnWithTheWholeUsage) {
  router_state s(config("least_loaded", false), make_policy("least_loaded"));
  s.add_replica("a", block, 0);
  s.enqueue(request(1, tokens(1, 30), 5), 0);
  (void)s.take_effects();
  step_output o = tokens_out(1, {11, 12});
  o.finished.push_back(finished_out(1, finish::stop, 30, 2).finished[0]);
  o.finished.back().usage.cached_prompt_tokens = 16;
  s.on_output(1, o);
  auto fx = s.take_effects();
  ASSERT_EQ(fx.to_streamer.tokens.size(), 2u);
  EXPECT_EQ(fx.to_streamer.tokens[0].token, 11);
  EXPECT_EQ(fx.to_streamer.tokens[1].token, 12);
  ASSERT_EQ(fx.to_streamer.finished.size(), 1u);
  EXPECT_EQ(fx.to_streamer.finished[0].reason, finish::stop);
  EXPECT_EQ(fx.to_streamer.finished[0].usage.prompt_tokens, 30);
  EXPECT_EQ(fx.to_streamer.finished[0].usage.completion_tokens, 2);
  EXPECT_EQ(fx.to_streamer.finished[0].usage.cached_prompt_tokens, 16);
  EXPECT_TRUE(fx.drop.empty());
  auto st = s.stats();
  EXPECT_EQ(stats_of(st, 1)->in_flight, 0);
  EXPECT_EQ(stats_of(st, 1)->tokens, 2);
  EXPECT_EQ(st.stale_outputs, 0);
}

TEST(RouterState, NoReplicaFailsANewRequestAsOverloaded) {
  router_state s(config("least_loaded", false), make_policy("least_loaded"));
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.place.empty());
  ASSERT_EQ(fx.to_streamer.failed.size(), 1u);
  EXPECT_EQ(fx.to_streamer.failed[0].id, 1u);
  EXPECT_EQ(fx.to_streamer.failed[0].code, errc::no_replica);
  EXPECT_NE(fx.to_streamer.failed[0].message.find("no engine replica is available"), std::string::npos);
  EXPECT_EQ(s.stats().refused_no_replica, 1);
  EXPECT_EQ(s.stats().placed, 0);
  EXPECT_EQ(s.live_count(), 0u);

  // A worker joins: requests are placed again.
  s.add_replica("w", block, 0);
  s.enqueue(request(2, tokens(1, 20), 10), 0);
  EXPECT_EQ(placed_on(s), 1u);
}

TEST(RouterState, UseLocalFalseNeverPicksTheLocalReplica) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_local(block, 0);
  EXPECT_TRUE(s.live(0));
  EXPECT_EQ(s.live_count(), 0u);
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  auto fx = s.take_effects();
  ASSERT_EQ(fx.to_streamer.failed.size(), 1u);
  EXPECT_NE(fx.to_streamer.failed[0].message.find("cluster.local_replica = false"), std::string::npos)
      << fx.to_streamer.failed[0].message;
  s.add_replica("w", block, 0);
  for (uint64_t id = 2; id <= 5; ++id) {
    s.enqueue(request(id, tokens(1, 20), 10), 0);
    EXPECT_EQ(placed_on(s), 1u);
  }
  // With use_local on again (a reload), the local replica takes its turn.
  s.set_policy(config("round_robin", true), make_policy("round_robin"));
  std::set<uint64_t> used;
  for (uint64_t id = 6; id <= 9; ++id) {
    s.enqueue(request(id, tokens(1, 20), 10), 0);
    used.insert(placed_on(s));
  }
  EXPECT_EQ(used, (std::set<uint64_t>{0, 1}));
}

TEST(RouterState, DrainingReplicasTakeNothingNewButFinishWhatTheyHave) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  EXPECT_EQ(placed_on(s), 1u);
  load_report leaving;
  leaving.draining = true;
  s.on_report(1, leaving, 10);
  EXPECT_TRUE(s.live(1));
  EXPECT_EQ(s.live_count(), 1u);
  EXPECT_EQ(s.stats().replicas.at(0).state, "draining");
  for (uint64_t id = 2; id <= 4; ++id) {
    s.enqueue(request(id, tokens(1, 20), 10), 0);
    EXPECT_EQ(placed_on(s), 2u);
  }
  // Its stream goes on, and a later report without the flag does not undrain it.
  s.on_report(1, load_report{}, 20);
  s.on_output(1, tokens_out(1, {5, 6}));
  s.on_output(1, finished_out(1, finish::stop, 20, 2));
  auto fx = s.take_effects();
  EXPECT_EQ(fx.to_streamer.tokens.size(), 2u);
  EXPECT_EQ(fx.to_streamer.finished.size(), 1u);
  EXPECT_EQ(s.stats().replicas.at(0).state, "draining");
  // Drained, it leaves: not a death.
  s.kill(1, "worker left", 30);
  EXPECT_EQ(s.stats().replica_deaths, 0);
  EXPECT_FALSE(s.live(1));

  // drain() directly, and the last replica draining: nothing can be placed.
  s.drain(2);
  EXPECT_EQ(s.live_count(), 0u);
  s.enqueue(request(9, tokens(1, 20), 10), 0);
  fx = s.take_effects();
  ASSERT_EQ(fx.to_streamer.failed.size(), 1u);
  EXPECT_NE(fx.to_streamer.failed[0].message.find("draining"), std::string::npos);
}

TEST(RouterState, DropPauseResumeGoToTheOwner) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  s.enqueue(request(2, tokens(1, 20), 10), 0);
  (void)s.take_effects();
  s.pause(2);
  s.resume(2);
  s.drop(1);
  auto fx = s.take_effects();
  EXPECT_EQ(fx.pause, (std::vector<std::pair<uint64_t, uint64_t>>{{2, 2}}));
  EXPECT_EQ(fx.resume, (std::vector<std::pair<uint64_t, uint64_t>>{{2, 2}}));
  EXPECT_EQ(fx.drop, (std::vector<std::pair<uint64_t, uint64_t>>{{1, 1}}));
  EXPECT_EQ(s.stats().replicas.at(0).in_flight, 0);
  // A dropped request's last tokens are stale: not passed on, the replica told again.
  s.on_output(1, tokens_out(1, {5}));
  fx = s.take_effects();
  EXPECT_TRUE(fx.to_streamer.empty());
  EXPECT_EQ(fx.drop, (std::vector<std::pair<uint64_t, uint64_t>>{{1, 1}}));
  // Flow control for a request the router does not know is nobody's.
  s.pause(99);
  s.resume(99);
  s.drop(99);
  fx = s.take_effects();
  EXPECT_TRUE(fx.pause.empty() && fx.resume.empty() && fx.drop.empty());
}

TEST(RouterState, OutputsOfAnotherReplicaForARequestAreStale) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  EXPECT_EQ(placed_on(s), 1u);
  s.on_output(2, tokens_out(1, {5}));
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.to_streamer.empty());
  EXPECT_EQ(fx.drop, (std::vector<std::pair<uint64_t, uint64_t>>{{2, 1}}));
  EXPECT_EQ(s.stats().stale_outputs, 1);
  // The owner's outputs still pass.
  s.on_output(1, tokens_out(1, {6}));
  EXPECT_EQ(s.take_effects().to_streamer.tokens.size(), 1u);
}

TEST(RouterState, FailuresOfOwnedRequestsPassOn) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_replica("a", block, 0);
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  (void)s.take_effects();
  step_output o;
  o.failed.push_back(seq_failed{1, errc::kv_capacity, "too long"});
  s.on_output(1, o);
  auto fx = s.take_effects();
  ASSERT_EQ(fx.to_streamer.failed.size(), 1u);
  EXPECT_EQ(fx.to_streamer.failed[0].code, errc::kv_capacity);
  EXPECT_EQ(s.stats().replicas.at(0).in_flight, 0);
}

TEST(RouterState, SetPolicySwapsWithoutMovingWhatIsInFlight) {
  router_state s(config("least_loaded", false), make_policy("least_loaded"));
  s.add_replica("a", block, 0);
  s.add_replica("b", block, 0);
  s.enqueue(request(1, tokens(1, 20), 10), 0);
  EXPECT_EQ(placed_on(s), 1u);
  s.set_policy(config("round_robin", false), make_policy("round_robin"));
  EXPECT_EQ(s.stats().policy, "round_robin");
  EXPECT_EQ(s.config().policy, "round_robin");
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.place.empty() && fx.drop.empty());
  s.on_output(1, tokens_out(1, {5}));
  EXPECT_EQ(s.take_effects().to_streamer.tokens.size(), 1u);
}

// ---- who may join: replicas compute alike ----------------------------------------------------------

namespace {

replica_numerics numerics(const std::string& matmul, const std::string& kv = "f16") {
  return {{"model.weights", "0123abcd"}, {"model.matmul", matmul}, {"kv.type", kv}};
}

}  // namespace

TEST(RouterState, AWorkerMustComputeAsTheFrontsOwnReplica) {
  auto c = config("round_robin");
  c.numerics = numerics("llama.cpp");
  router_state s(c, make_policy("round_robin"));
  s.add_local(block, 0);
  EXPECT_EQ(s.numerics_conflict(numerics("llama.cpp")), "");
  const std::string why = s.numerics_conflict(numerics("fast"));
  EXPECT_NE(why.find("model.matmul differs"), std::string::npos) << why;
  EXPECT_NE(why.find("this worker's is 'fast'"), std::string::npos) << why;
  EXPECT_NE(why.find("the cluster's is 'llama.cpp' (the front's own replica)"), std::string::npos) << why;
  const std::string kv = s.numerics_conflict(numerics("llama.cpp", "q8"));
  EXPECT_NE(kv.find("kv.type differs: this worker's is 'q8', the cluster's is 'f16'"), std::string::npos) << kv;
  EXPECT_NE(kv.find("set the same kv.f32 and kv.q8 on every node"), std::string::npos) << kv;  // the keys to set
  // A worker that reports nothing (an older build) is not taken on trust.
  const std::string none = s.numerics_conflict({});
  EXPECT_NE(none.find("this worker's is (not reported)"), std::string::npos) << none;
  // Nor one that reports a key the front does not have.
  auto extra = numerics("llama.cpp");
  extra["model.backend"] = "cuda";
  const std::string more = s.numerics_conflict(extra);
  EXPECT_NE(more.find("model.backend differs: this worker's is 'cuda', the cluster's is (not reported)"),
            std::string::npos)
      << more;
  // A reload (which carries no numerics) keeps the front's.
  s.set_policy(config("least_loaded"), make_policy("least_loaded"));
  EXPECT_NE(s.numerics_conflict(numerics("fast")).find("model.matmul differs"), std::string::npos);
}

TEST(RouterState, WithoutALocalReplicaServingTheLiveWorkersSetTheNumerics) {
  auto c = config("round_robin", false);
  c.numerics = numerics("llama.cpp");  // the front's standby replica computes nothing that is served
  router_state s(c, make_policy("round_robin"));
  s.add_local(block, 0);
  EXPECT_EQ(s.numerics_conflict(numerics("fast")), "");  // the first worker sets them
  EXPECT_EQ(s.add_replica("w1", block, 0, numerics("fast")), 1u);
  EXPECT_EQ(s.numerics_conflict(numerics("fast")), "");
  const std::string why = s.numerics_conflict(numerics("llama.cpp"));
  EXPECT_NE(why.find("this worker's is 'llama.cpp', the cluster's is 'fast' (replica 1 (w1))"), std::string::npos)
      << why;
  // Once no worker with them is left, nothing is served with them: the next worker sets them again.
  s.kill(1, "connection lost", 0);
  EXPECT_EQ(s.numerics_conflict(numerics("llama.cpp")), "");
}

// ---- what /health and /metrics are told ---------------------------------------------------------------

TEST(RouterState, ADeadReplicaReportsNoLoadAndIsForgottenAMinuteLater) {
  router_state s(config("least_loaded"), make_policy("least_loaded"));
  s.add_local(block, 0);
  s.add_replica("w", block, 0);
  load_report busy;
  busy.running = 3;
  busy.waiting = 1;
  busy.kv_blocks_available = 100;
  busy.kv_blocks_total = 728;
  s.on_report(1, busy, 1000 * ms);
  ASSERT_NE(stats_of(s.stats(), 1), nullptr);
  EXPECT_EQ(stats_of(s.stats(), 1)->load.running, 3);
  s.kill(1, "connection lost", 2000 * ms);
  const auto after = s.stats();  // stats_of points into it
  const auto* dead = stats_of(after, 1);
  ASSERT_NE(dead, nullptr);
  EXPECT_EQ(dead->state, "dead");
  EXPECT_EQ(dead->load.running, 0);
  EXPECT_EQ(dead->load.waiting, 0);
  EXPECT_EQ(dead->load.kv_blocks_available, 0);
  // Listed as dead for dead_kept_us, then gone; the local replica and the counters stay.
  EXPECT_TRUE(s.expire(2000 * ms + router_state::dead_kept_us).empty());
  EXPECT_NE(stats_of(s.stats(), 1), nullptr);
  s.expire(2000 * ms + router_state::dead_kept_us + 1);
  EXPECT_EQ(stats_of(s.stats(), 1), nullptr);
  EXPECT_NE(stats_of(s.stats(), 0), nullptr);
  EXPECT_EQ(s.stats().replica_deaths, 1);
  // Its late output finds no replica: dropped, never passed on.
  s.on_output(1, tokens_out(5, {1, 2}));
  auto fx = s.take_effects();
  EXPECT_TRUE(fx.to_streamer.tokens.empty());
  EXPECT_EQ(s.add_replica("w", block, 0), 2u);  // ids are still never reused
}

TEST(RouterState, StatsSayWhyNoReplicaCanTakeARequest) {
  router_state s(config("round_robin", false), make_policy("round_robin"));
  s.add_local(block, 0);
  std::string why = s.stats().no_replica;
  EXPECT_NE(why.find("no worker is joined"), std::string::npos) << why;
  EXPECT_NE(why.find("cluster.local_replica = false"), std::string::npos) << why;
  s.add_replica("w", block, 0);
  EXPECT_EQ(s.stats().no_replica, "");
  s.drain(1);
  why = s.stats().no_replica;
  EXPECT_NE(why.find("1 draining"), std::string::npos) << why;
  s.kill(1, "connection lost", 0);
  why = s.stats().no_replica;
  EXPECT_NE(why.find("1 dead"), std::string::npos) << why;
  s.expire(router_state::dead_kept_us + 1);  // forgotten
  why = s.stats().no_replica;
  EXPECT_NE(why.find("no worker is joined"), std::string::npos) << why;
  EXPECT_EQ(why.find("dead"), std::string::npos) << why;
  // With the front's own replica serving, there is always one.
  router_state local(config("round_robin", true), make_policy("round_robin"));
  local.add_local(block, 0);
  EXPECT_EQ(local.stats().no_replica, "");
}

// The built-in routing policies (round_robin, least_loaded, prefix_affinity) on plain replica
// views, and the registry that makes them by name.
#include <gtest/gtest.h>

#include <algorithm>

#include "actors/router/policy.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

std::unique_ptr<routing_policy> make(const std::string& name, routing_options o = {}) {
  auto p = routing_policy_registry().make(name, o);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.ok() ? std::move(p.value()) : nullptr;
}

replica_view view(uint64_t id, int64_t queued = 0, int32_t waiting = 0, int32_t running = 0, int32_t kv_free = 0,
                  int32_t hit = 0) {
  replica_view v;
  v.id = id;
  v.queued_tokens = queued;
  v.waiting = waiting;
  v.running = running;
  v.kv_blocks_available = kv_free;
  v.kv_blocks_total = 1000;
  v.prefix_hit_tokens = hit;
  return v;
}

uint64_t picked(routing_policy& p, const std::vector<replica_view>& vs) {
  auto i = p.pick(route_request{}, vs);
  EXPECT_TRUE(i.has_value());
  EXPECT_LT(*i, vs.size());
  return vs[*i].id;
}

}  // namespace

TEST(RoutingPolicyRegistry, HoldsTheBuiltIns) {
  auto names = routing_policy_registry().names();
  for (const char* n : {"round_robin", "least_loaded", "prefix_affinity"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const char* n : {"round_robin", "least_loaded", "prefix_affinity"}) {
    auto p = make(n);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->name(), n);
  }
  EXPECT_TRUE(make("prefix_affinity")->wants_prefix_hits());
  EXPECT_FALSE(make("least_loaded")->wants_prefix_hits());
  EXPECT_FALSE(make("round_robin")->wants_prefix_hits());
}

TEST(RoutingPolicyRegistry, UnknownNameListsTheKnownOnes) {
  auto p = routing_policy_registry().make("random_walk", routing_options{});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("random_walk"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("routing policy"), std::string::npos) << p.error();
  for (const char* n : {"round_robin", "least_loaded", "prefix_affinity"})
    EXPECT_NE(p.error().find(n), std::string::npos) << p.error();
}

TEST(RoutingPolicyRegistry, UnknownOptionNamesItAndTheKnownOnes) {
  routing_options o;
  o.values["max_imbalanse"] = 10;  // a typo
  auto p = routing_policy_registry().make("prefix_affinity", o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("'max_imbalanse'"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("max_imbalance, balance_ratio"), std::string::npos) << p.error();

  routing_options any;
  any.values["weight"] = 1;
  for (const char* n : {"round_robin", "least_loaded"}) {
    auto q = routing_policy_registry().make(n, any);
    ASSERT_FALSE(q.ok()) << n;
    EXPECT_NE(q.error().find("'weight'"), std::string::npos) << q.error();
    EXPECT_NE(q.error().find(std::string("'") + n + "'"), std::string::npos) << q.error();
    EXPECT_NE(q.error().find("(it has: none)"), std::string::npos) << q.error();
  }
}

TEST(RoutingPolicyRegistry, PrefixAffinityOptionsOutOfRangeAreRefused) {
  routing_options neg;
  neg.values["max_imbalance"] = -1;
  auto a = routing_policy_registry().make("prefix_affinity", neg);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().find("max_imbalance"), std::string::npos) << a.error();
  routing_options low;
  low.values["balance_ratio"] = 0.5;
  auto b = routing_policy_registry().make("prefix_affinity", low);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().find("balance_ratio"), std::string::npos) << b.error();
  routing_options ok;
  ok.values["max_imbalance"] = 0;
  ok.values["balance_ratio"] = 1;
  EXPECT_TRUE(routing_policy_registry().make("prefix_affinity", ok).ok());
}

TEST(RoutingPolicies, RoundRobinCyclesByReplicaId) {
  auto p = make("round_robin");
  // Candidates in any order: the cycle follows ids, not positions.
  std::vector<replica_view> vs = {view(2), view(0), view(1)};
  std::vector<uint64_t> got;
  for (int i = 0; i < 7; ++i) got.push_back(picked(*p, vs));
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 0, 1, 2, 0}));
  // Replica 1 leaves, replica 5 joins: after 0 comes 2, then 5, then around again.
  vs = {view(0), view(2), view(5)};
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(picked(*p, vs));
  EXPECT_EQ(got, (std::vector<uint64_t>{2, 5, 0, 2}));
  // Load is no concern of round_robin's.
  vs = {view(0, 100000), view(2, 0), view(5, 0)};
  EXPECT_EQ(picked(*p, vs), 5u);
  EXPECT_EQ(picked(*p, vs), 0u);
}

TEST(RoutingPolicies, LeastLoadedOrdersByQueuedTokensThenSequencesThenFreeKv) {
  auto p = make("least_loaded");
  // Queued tokens first, whatever the reports say.
  EXPECT_EQ(picked(*p, {view(1, 500, 0, 0, 900), view(2, 400, 9, 9, 0)}), 2u);
  // Equal queued tokens: fewer sequences waiting + running.
  EXPECT_EQ(picked(*p, {view(1, 400, 2, 3, 900), view(2, 400, 1, 3, 0)}), 2u);
  EXPECT_EQ(picked(*p, {view(1, 400, 4, 0, 0), view(2, 400, 0, 5, 900)}), 1u);
  // Then more free KV blocks.
  EXPECT_EQ(picked(*p, {view(1, 400, 1, 1, 100), view(2, 400, 2, 0, 300)}), 2u);
  // All equal: the smallest id, wherever it stands.
  EXPECT_EQ(picked(*p, {view(7, 10, 1, 1, 5), view(3, 10, 1, 1, 5), view(4, 10, 1, 1, 5)}), 3u);
}

TEST(RoutingPolicies, PrefixAffinityPrefersTheReplicaHoldingThePrefix) {
  auto p = make("prefix_affinity");
  // The most hit tokens wins over a lighter load (within the default imbalance).
  EXPECT_EQ(picked(*p, {view(1, 0, 0, 0, 0, 0), view(2, 3000, 0, 0, 0, 64), view(3, 100, 0, 0, 0, 32)}), 2u);
  // Equal hits: the less loaded of those.
  EXPECT_EQ(picked(*p, {view(1, 0, 0, 0, 0, 0), view(2, 900, 0, 0, 0, 64), view(3, 800, 0, 0, 0, 64)}), 3u);
  // No hit anywhere: least_loaded's choice.
  EXPECT_EQ(picked(*p, {view(1, 900), view(2, 200), view(3, 500)}), 2u);
}

// A replica that holds only a small share of the prompt (the chat template's opening, which every
// prompt shares) has no affinity: the least loaded one gets it, so one replica does not take
// everything while the others idle.
TEST(RoutingPolicies, PrefixAffinityNeedsAShareOfThePrompt) {
  auto p = make("prefix_affinity");
  route_request r;
  r.prompt_tokens = 48;
  std::vector<replica_view> vs = {view(1, 300, 0, 0, 0, 16), view(2, 0)};
  EXPECT_EQ(p->pick(r, vs), std::optional<size_t>(1));  // 16 of 48: least loaded
  vs = {view(1, 300, 0, 0, 0, 32), view(2, 0)};
  EXPECT_EQ(p->pick(r, vs), std::optional<size_t>(0));  // 32 of 48: affinity
  routing_options o;
  o.values["min_hit_ratio"] = 0.0;
  auto any = routing_policy_registry().make("prefix_affinity", o);
  ASSERT_TRUE(any.ok());
  vs = {view(1, 300, 0, 0, 0, 16), view(2, 0)};
  EXPECT_EQ((*any)->pick(r, vs), std::optional<size_t>(0));
  o.values["min_hit_ratio"] = 1.5;
  EXPECT_FALSE(routing_policy_registry().make("prefix_affinity", o).ok());
}

TEST(RoutingPolicies, PrefixAffinityFallsBackToLeastLoadedPastTheImbalance) {
  routing_options o;
  o.values["max_imbalance"] = 1000;
  o.values["balance_ratio"] = 2;
  auto p = make("prefix_affinity", o);
  // 1500 over the least loaded's 400: more than 1000 tokens and more than 2x: balance wins.
  EXPECT_EQ(picked(*p, {view(1, 1900, 0, 0, 0, 256), view(2, 400)}), 2u);
  // More than 1000 tokens but not 2x (3000 vs 1900): affinity keeps it.
  EXPECT_EQ(picked(*p, {view(1, 3000, 0, 0, 0, 256), view(2, 1900)}), 1u);
  // More than 2x but within 1000 tokens (900 vs 100): affinity keeps it.
  EXPECT_EQ(picked(*p, {view(1, 900, 0, 0, 0, 256), view(2, 100)}), 1u);
  // Exactly at the limit is not past it.
  EXPECT_EQ(picked(*p, {view(1, 1000, 0, 0, 0, 256), view(2, 0)}), 1u);
  EXPECT_EQ(picked(*p, {view(1, 1001, 0, 0, 0, 256), view(2, 0)}), 2u);
}

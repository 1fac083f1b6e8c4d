#pragma once
// What the router_state tests share (router_state_test.cpp, router_state_migration_test.cpp):
// configs and policies, requests, step outputs, and readers of the effects and stats.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "actors/router/router_state.hpp"

namespace troupe::actors::router_test {

inline constexpr int64_t ms = 1000;
inline constexpr int32_t block = 16;

inline std::unique_ptr<routing_policy> make_policy(const std::string& name, routing_options o = {}) {
  auto p = routing_policy_registry().make(name, o);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.ok() ? std::move(p.value()) : nullptr;
}

inline router_config config(const std::string& policy, bool use_local = true) {
  router_config c;
  c.policy = policy;
  c.use_local = use_local;
  c.dead_after_ms = 3000;
  return c;
}

inline std::vector<int32_t> tokens(int32_t first, size_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline admitted_request request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens) {
  admitted_request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.seed = 42;
  r.tenant = "t";
  return r;
}

inline step_output tokens_out(uint64_t id, std::vector<int32_t> toks) {
  step_output o;
  for (int32_t t : toks) o.tokens.push_back(token_out{id, t, 0.0f, {}});
  return o;
}

inline step_output finished_out(uint64_t id, const std::string& reason, int32_t prompt, int32_t completion) {
  step_output o;
  seq_finished f;
  f.id = id;
  f.reason = reason;
  f.usage.prompt_tokens = prompt;
  f.usage.completion_tokens = completion;
  o.finished.push_back(f);
  return o;
}

// Where the last enqueue went (the one place it produced).
inline uint64_t placed_on(router_state& s) {
  auto fx = s.take_effects();
  EXPECT_EQ(fx.place.size(), 1u);
  return fx.place.empty() ? ~0ull : fx.place.front().first;
}

inline bool has_line(const std::vector<std::string>& log, const std::string& part) {
  return std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

inline const replica_stats* stats_of(const router_stats& s, uint64_t id) {
  for (const auto& r : s.replicas)
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace troupe::actors::router_test

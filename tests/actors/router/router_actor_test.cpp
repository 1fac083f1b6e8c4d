// The router actor inside a pipeline (fake backend): every request goes through it to the front's
// own replica and back unchanged, its stats count what it placed, and its policy is swapped by a
// reload (decided from the config diff) while streams run, without losing a token.
#include "actors/router/router_actor.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "actors/client.hpp"
#include "actors/router/replica_door.hpp"
#include "tests/support/changed_stages.hpp"
#include "tests/support/fake_pipeline.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fake_options;
using troupe::test::fake_reference;
using namespace std::chrono_literals;

namespace {

std::vector<int32_t> bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

// Without the response cache: a hit would never reach the router.
actors::pipeline_config uncached() {
  auto c = test::small_pipeline_config();
  c.cache.enabled = false;
  return c;
}

}  // namespace

TEST(router_actor, routes_every_request_to_the_local_replica_and_back) {
  runtime rt;
  fake_options fo;
  auto p = test::start_fake(rt, uncached(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> streams;
  for (int i = 0; i < 12; ++i) streams.push_back(c.submit(test::prompt_spec("route " + std::to_string(i), 20)));
  for (int i = 0; i < 12; ++i) {
    auto out = streams[static_cast<size_t>(i)]->wait(30s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    EXPECT_EQ(out.tokens, fake_reference(fo, bytes("route " + std::to_string(i)), 20)) << i;
  }
  auto st = p->get_router_stats();
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->policy, "least_loaded");
  ASSERT_EQ(st->replicas.size(), 1u);
  EXPECT_EQ(st->replicas[0].id, 0u);
  EXPECT_EQ(st->replicas[0].placed, 12);
  EXPECT_EQ(st->replicas[0].tokens, 12 * 20);
  EXPECT_EQ(st->placed, 12);
  EXPECT_EQ(st->migrations, 0);
}

TEST(router_actor, a_reload_swaps_the_routing_policy_in_place_and_refuses_unknown_names) {
  runtime rt;
  fake_options fo;
  auto cfg = uncached();
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> streams;
  for (int i = 0; i < 8; ++i) streams.push_back(c.submit(test::prompt_spec("swap " + std::to_string(i), 60)));
  auto next = cfg;
  next.router.policy = "prefix_affinity";
  next.router.policy_opts.values["max_imbalance"] = 1024;
  auto stages = test::changed_stages(p->config(), next);
  EXPECT_EQ(stages, std::set<std::string>{"router"});
  auto r = p->reconfigure(next, stages, 10s);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, std::vector<std::string>{"router"});
  EXPECT_EQ(p->get_router_stats()->policy, "prefix_affinity");
  for (int i = 0; i < 8; ++i) {
    auto out = streams[static_cast<size_t>(i)]->wait(30s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    EXPECT_EQ(out.tokens, fake_reference(fo, bytes("swap " + std::to_string(i)), 60)) << i;
  }
  auto bad = next;
  bad.router.policy = "random_walk";
  auto refused = p->reconfigure(bad, test::changed_stages(p->config(), bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("random_walk"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("round_robin"), std::string::npos) << refused.error();
  EXPECT_EQ(p->get_router_stats()->policy, "prefix_affinity");
  auto opts = next;
  opts.router.policy_opts.values["no_such_knob"] = 1;
  auto refused_opts = p->reconfigure(opts, test::changed_stages(p->config(), opts));
  ASSERT_FALSE(refused_opts.ok());
  EXPECT_NE(refused_opts.error().find("no_such_knob"), std::string::npos) << refused_opts.error();
}

namespace {

// The door's status once the router has answered its join (joined or refused).
door_status join_answer(caf::actor_system& sys, const door_actor& door) {
  caf::scoped_actor self{sys};
  door_status st;
  for (int i = 0; i < 500; ++i) {
    self->request(door, 2s, stats_atom::value).receive([&](door_status& s) { st = std::move(s); }, [](caf::error&) {});
    if (st.joined || !st.refused.empty()) break;
    std::this_thread::sleep_for(10ms);
  }
  return st;
}

}  // namespace

TEST(router_actor, refuses_a_worker_that_computes_differently_naming_the_key_and_both_values) {
  runtime rt;
  auto& sys = rt.system();
  router_options o;
  o.model = "m";
  o.n_vocab = 300;
  o.config.numerics = {{"model.weights", "feed"}, {"model.matmul", "llama.cpp"}, {"kv.type", "f16"}};
  auto router = spawn_router(sys, o);
  door_options d;
  d.model = "m";
  d.n_vocab = 300;
  d.name = "odd";
  d.numerics = {{"model.weights", "feed"}, {"model.matmul", "fast"}, {"kv.type", "f16"}};
  auto odd = spawn_replica_door(sys, d);
  caf::anon_send(odd, connect_atom::value, router);
  auto st = join_answer(sys, odd);
  EXPECT_FALSE(st.joined);
  EXPECT_NE(st.refused.find("model.matmul differs: this worker's is 'fast', the cluster's is 'llama.cpp'"),
            std::string::npos)
      << st.refused;

  d.name = "alike";
  d.numerics = o.config.numerics;
  auto alike = spawn_replica_door(sys, d);
  caf::anon_send(alike, connect_atom::value, router);
  st = join_answer(sys, alike);
  EXPECT_TRUE(st.joined) << st.refused;
  EXPECT_EQ(st.replica_id, 1u);  // the refused one took no id

  for (const auto& a : {caf::actor_cast<caf::actor>(odd), caf::actor_cast<caf::actor>(alike),
                        caf::actor_cast<caf::actor>(router)})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

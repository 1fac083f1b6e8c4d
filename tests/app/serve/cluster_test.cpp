// The cluster side of serve (app/serve/cluster.cpp): what decides a replica's numbers (the
// front compares them at join), and what /metrics and /health say of the replicas: one series
// per replica whatever its state, its state as a gauge of its own, no load figures for a dead
// replica, and cluster-wide totals over the replicas that serve.
#include "app/serve/cluster.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <string>

#include "tests/support/synthetic_model.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {

std::shared_ptr<model::llama_model> synthetic(uint32_t seed, model::ggml_type matrices = model::ggml_type::f32) {
  test::synthetic_options o;
  o.seed = seed;
  o.matrix_type = matrices;
  auto m = model::llama_model::load(test::make_synthetic_file(o));
  EXPECT_TRUE(m.ok()) << m.error();
  return m.ok() ? m.value() : nullptr;
}

// {"name{labels}": value} of every sample line.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  const std::regex line(R"(^([a-z_]+(\{[^}]*\})?) (\S+)$)");
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string l = text.substr(at, end - at);
    std::smatch m;
    if (!l.empty() && l[0] != '#' && std::regex_match(l, m, line)) out[m[1]] = m[3];
    at = end + 1;
  }
  return out;
}

actors::replica_stats replica(uint64_t id, const std::string& name, const std::string& state, int32_t running,
                              int32_t kv_available, int32_t kv_total) {
  actors::replica_stats r;
  r.id = id;
  r.name = name;
  r.state = state;
  r.load.running = running;
  r.load.waiting = 1;
  r.load.kv_blocks_available = kv_available;
  r.load.kv_blocks_total = kv_total;
  r.in_flight = running;
  r.placed = 10 + static_cast<int64_t>(id);
  r.tokens = 100;
  return r;
}

}  // namespace

TEST(cluster_numerics, name_the_weights_the_matmul_that_runs_and_the_kv_type) {
  ::unsetenv("TROUPE_MATMUL_ORDER");
  auto a = synthetic(1), again = synthetic(1), other = synthetic(2);
  ASSERT_TRUE(a && again && other);
  config::troupe_config c;
  const auto n = app::numerics_of(c, *a);
  EXPECT_EQ(n.at("model.backend"), "cpu");
  EXPECT_EQ(n.at("model.matmul"), "llama.cpp");
  EXPECT_EQ(n.at("kv.type"), "f16");
  EXPECT_EQ(n.at("kv.block_size"), "16");
  EXPECT_EQ(n.at("model.weights").size(), 32u);
  // The same weights give the same digest; other weights (another seed) another.
  EXPECT_EQ(app::numerics_of(c, *again), n);
  EXPECT_NE(app::numerics_of(c, *other).at("model.weights"), n.at("model.weights"));

  c.backend.kv_q8 = true;
  EXPECT_EQ(app::numerics_of(c, *a).at("kv.type"), "q8");
  c.backend.kv_q8 = false;
  c.backend.kv_f32 = true;
  EXPECT_EQ(app::numerics_of(c, *a).at("kv.type"), "f32");
  c.backend.kv_f32 = false;

  // "fast" asked for, but f32 matrices have no fast kernel: the backend runs llama.cpp's order,
  // and that is what a replica reports.
  c.backend.matmul = model::matmul_order::fast;
  EXPECT_EQ(app::numerics_of(c, *a).at("model.matmul"), "llama.cpp");
  // TROUPE_MATMUL_ORDER overrides the option in the backend: here too.
  auto q = synthetic(1, model::ggml_type::q4_0);
  ASSERT_TRUE(q);
  ::setenv("TROUPE_MATMUL_ORDER", "llama.cpp", 1);
  EXPECT_EQ(app::numerics_of(c, *q).at("model.matmul"), "llama.cpp");
  ::unsetenv("TROUPE_MATMUL_ORDER");
  c.backend.matmul = model::matmul_order::llama_cpp;
  EXPECT_EQ(app::numerics_of(c, *q).at("model.matmul"), "llama.cpp");

  c.model.backend = "cuda";  // no cpu matmul order there
  EXPECT_EQ(app::numerics_of(c, *a).count("model.matmul"), 0u);
  EXPECT_EQ(app::numerics_of(c, *a).at("model.backend"), "cuda");
}

TEST(cluster_metrics, one_series_per_replica_its_state_a_gauge_and_no_load_for_the_dead) {
  actors::router_stats s;
  s.policy = "round_robin";
  s.replicas = {replica(0, "local", "standby", 0, 700, 728), replica(1, "w1", "ready", 3, 600, 728),
                replica(2, "w2", "draining", 2, 650, 728), replica(3, "w\"3", "dead", 0, 0, 0)};
  s.migrations = 4;
  s.replica_deaths = 1;
  const auto m = samples(app::router_metrics(s));

  // The value series carry {replica, name} only: a state change keeps the series.
  EXPECT_EQ(m.at(R"(troupe_replica_running_sequences{replica="1",name="w1"})"), "3");
  for (const auto& [k, v] : m)
    if (k.rfind("troupe_replica_state", 0) != 0) EXPECT_EQ(k.find("state="), std::string::npos) << k;
  // Up: 1 for ready only.
  EXPECT_EQ(m.at(R"(troupe_replica_up{replica="0",name="local"})"), "0");
  EXPECT_EQ(m.at(R"(troupe_replica_up{replica="1",name="w1"})"), "1");
  EXPECT_EQ(m.at(R"(troupe_replica_up{replica="2",name="w2"})"), "0");
  EXPECT_EQ(m.at(R"(troupe_replica_up{replica="3",name="w_3"})"), "0");
  // The state: one-hot over the four.
  for (const char* st : {"ready", "draining", "standby", "dead"}) {
    EXPECT_EQ(m.at(std::string(R"(troupe_replica_state{replica="2",name="w2",state=")") + st + "\"}"),
              std::string(st) == "draining" ? "1" : "0")
        << st;
    EXPECT_EQ(m.at(std::string(R"(troupe_replica_state{replica="3",name="w_3",state=")") + st + "\"}"),
              std::string(st) == "dead" ? "1" : "0")
        << st;
  }
  // A dead replica's load is not reported; its counters are (final) until it is forgotten.
  for (const char* g : {"troupe_replica_in_flight", "troupe_replica_running_sequences", "troupe_replica_waiting_sequences",
                        "troupe_replica_kv_blocks_available"}) {
    EXPECT_EQ(m.count(std::string(g) + R"({replica="3",name="w_3"})"), 0u) << g;
    EXPECT_EQ(m.count(std::string(g) + R"({replica="2",name="w2"})"), 1u) << g;
  }
  EXPECT_EQ(m.at(R"(troupe_replica_placed_total{replica="3",name="w_3"})"), "13");
  // Cluster-wide totals: the replicas that serve (ready and draining), not the standby one.
  EXPECT_EQ(m.at("troupe_replicas_ready"), "1");
  EXPECT_EQ(m.at("troupe_cluster_running_sequences"), "5");
  EXPECT_EQ(m.at("troupe_cluster_waiting_sequences"), "2");
  EXPECT_EQ(m.at("troupe_cluster_kv_blocks_available"), "1250");
  EXPECT_EQ(m.at("troupe_cluster_kv_blocks_total"), "1456");
  EXPECT_EQ(m.at("troupe_migrations_total"), "4");
  EXPECT_EQ(m.at("troupe_replica_deaths_total"), "1");
}

TEST(cluster_health, says_why_no_replica_can_serve) {
  actors::router_stats s;
  s.policy = "round_robin";
  s.replicas = {replica(0, "local", "standby", 0, 700, 728)};
  EXPECT_EQ(app::router_health(s).find("no_replica"), std::string::npos);
  s.no_replica = "no worker is joined; the front's own replica does not serve (cluster.local_replica = false)";
  const std::string h = "{" + app::router_health(s) + "}";
  EXPECT_NE(h.find(R"("replicas_ready":0)"), std::string::npos) << h;
  EXPECT_NE(h.find(R"("no_replica":"no worker is joined; )"), std::string::npos) << h;
  EXPECT_NE(h.find(R"("state":"standby")"), std::string::npos) << h;
}

// CAF reads the cluster's TLS files only when a link opens, and a bad one then ends the front
// (std::terminate) or hangs a worker: check_cluster reads them first and names the key.
TEST(cluster_tls, files_that_cannot_serve_are_named_before_start) {
  test::temp_dir d("cluster-tls");
  const std::string dir = d.str();
  const std::string fixtures = TROUPE_FIXTURES;
  const std::string script = fixtures + "/../../scripts/make-cluster-certs.sh";
  ASSERT_EQ(std::system(("bash " + script + " " + dir + " a b >/dev/null").c_str()), 0);
  config::cluster_options c;
  c.listen = "127.0.0.1:0";
  c.tls_certificate = dir + "/a.pem";
  c.tls_key = dir + "/a.key";
  c.tls_ca = dir + "/ca.pem";
  EXPECT_TRUE(app::check_cluster(c).ok()) << app::check_cluster(c).error();
  auto expect_named = [&](const char* key, config::cluster_options bad) {
    auto s = app::check_cluster(bad);
    ASSERT_FALSE(s.ok()) << key;
    EXPECT_NE(s.error().find(key), std::string::npos) << s.error();
  };
  auto other_key = c;
  other_key.tls_key = dir + "/b.key";  // b's key with a's certificate
  expect_named("does not belong to cluster.tls_certificate", other_key);
  auto garbage_ca = c;
  garbage_ca.tls_ca = dir + "/a.key";  // a key is no CA certificate
  expect_named("cluster.tls_ca", garbage_ca);
  auto key_as_cert = c;
  key_as_cert.tls_certificate = dir + "/a.key";
  expect_named("cluster.tls_certificate", key_as_cert);
  auto cert_as_key = c;
  cert_as_key.tls_key = dir + "/a.pem";
  expect_named("cluster.tls_key", cert_as_key);
}

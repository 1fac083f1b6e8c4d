#include "app/serve/cluster.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <unistd.h>

#include <cstdlib>

#include "actors/detail/caf_util.hpp"
#include "net/json_writer.hpp"

namespace troupe::app {

result<host_port> parse_host_port(const std::string& s, const std::string& what) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return make_error(what + " must be HOST:PORT, got '" + s + "'");
  host_port hp;
  hp.host = s.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  char* end = nullptr;
  const long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535)
    return make_error(what + ": '" + s.substr(colon + 1) + "' is not a port (0..65535)");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

status check_cluster(const config::cluster_options& c) {
  const int set = !c.tls_certificate.empty() + !c.tls_key.empty() + !c.tls_ca.empty();
  if (set != 0 && set != 3)
    return make_error("cluster.tls_certificate, cluster.tls_key and cluster.tls_ca go together: set all three or none");
  for (const auto* path : {&c.tls_certificate, &c.tls_key, &c.tls_ca})
    if (!path->empty() && ::access(path->c_str(), R_OK) != 0)
      return make_error("cannot read " + *path + " (a cluster.tls_* file)");
  if (c.listen.empty()) return {};
  auto hp = parse_host_port(c.listen, "cluster.listen");
  if (!hp) return make_error(hp.error());
  if (!is_loopback(hp->host) && !c.tls())
    return make_error("cluster.listen = '" + c.listen +
                      "' is not a loopback address: set cluster.tls_certificate, cluster.tls_key and cluster.tls_ca "
                      "(scripts/make-cluster-certs.sh makes them), or listen on 127.0.0.1 (plain TCP is for "
                      "loopback only; see docs/cluster.md)");
  return {};
}

actors::runtime_options cluster_runtime(const config::cluster_options& c) {
  actors::runtime_options o;
  o.network = true;
  o.tls_certificate = c.tls_certificate;
  o.tls_key = c.tls_key;
  o.tls_ca = c.tls_ca;
  return o;
}

result<uint16_t> publish_router(caf::actor_system& sys, const caf::actor& router, const config::cluster_options& c) {
  auto hp = parse_host_port(c.listen, "cluster.listen");
  if (!hp) return make_error(hp.error());
  if (!router) return make_error("the pipeline has no router to publish");
  auto handle = caf::actor_cast<actors::router_actor>(router);
  auto port = c.tls() ? caf::openssl::publish(handle, hp->port, hp->host.c_str(), true)
                      : sys.middleman().publish(handle, hp->port, hp->host.c_str(), true);
  if (!port) return make_error("cannot listen for workers on " + c.listen + ": " + sys.render(port.error()));
  return *port;
}

result<actors::router_actor> connect_router(caf::actor_system& sys, const host_port& front, bool tls) {
  auto r = tls ? caf::openssl::remote_actor<actors::router_actor>(sys, front.host, front.port)
               : sys.middleman().remote_actor<actors::router_actor>(front.host, front.port);
  if (!r) return make_error(sys.render(r.error()));
  return std::move(*r);
}

std::string router_metrics(const actors::router_stats& s) {
  std::string g;
  auto head = [&](const char* name, const char* help, const char* type) {
    g += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto label = [](const actors::replica_stats& r) {
    std::string name;
    for (char c : r.name) name += (c == '"' || c == '\\' || c == '\n') ? '_' : c;
    return "{replica=\"" + std::to_string(r.id) + "\",name=\"" + name + "\",state=\"" + r.state + "\"}";
  };
  head("troupe_replica_up", "1 for a replica taking requests, 0 draining or dead.", "gauge");
  for (const auto& r : s.replicas) g += "troupe_replica_up" + label(r) + " " + (r.state == "ready" ? "1" : "0") + "\n";
  head("troupe_replica_in_flight", "Requests the router has placed on the replica and not seen end.", "gauge");
  for (const auto& r : s.replicas) g += "troupe_replica_in_flight" + label(r) + " " + std::to_string(r.in_flight) + "\n";
  head("troupe_replica_running_sequences", "Sequences holding KV on the replica (its last load report).", "gauge");
  for (const auto& r : s.replicas) g += "troupe_replica_running_sequences" + label(r) + " " + std::to_string(r.load.running) + "\n";
  head("troupe_replica_kv_blocks_available", "Free or evictable KV blocks on the replica (its last load report).", "gauge");
  for (const auto& r : s.replicas)
    g += "troupe_replica_kv_blocks_available" + label(r) + " " + std::to_string(r.load.kv_blocks_available) + "\n";
  head("troupe_replica_placed_total", "Requests placed on the replica (continuations of migrated ones included).", "counter");
  for (const auto& r : s.replicas) g += "troupe_replica_placed_total" + label(r) + " " + std::to_string(r.placed) + "\n";
  head("troupe_replica_tokens_total", "Tokens passed on from the replica.", "counter");
  for (const auto& r : s.replicas) g += "troupe_replica_tokens_total" + label(r) + " " + std::to_string(r.tokens) + "\n";
  head("troupe_migrations_total", "Requests moved off a dead replica onto another.", "counter");
  g += "troupe_migrations_total " + std::to_string(s.migrations) + "\n";
  head("troupe_replica_deaths_total", "Replicas declared dead (connection closed or silent too long).", "counter");
  g += "troupe_replica_deaths_total " + std::to_string(s.replica_deaths) + "\n";
  head("troupe_requests_refused_no_replica_total", "Requests failed because no replica was live.", "counter");
  g += "troupe_requests_refused_no_replica_total " + std::to_string(s.refused_no_replica) + "\n";
  return g;
}

std::string router_health(const actors::router_stats& s) {
  net::json_writer w;
  int64_t ready = 0;
  for (const auto& r : s.replicas) ready += r.state == "ready" ? 1 : 0;
  w.key("router").begin_object().field("policy", s.policy).field("replicas_ready", ready);
  w.field("migrations", s.migrations).field("replica_deaths", s.replica_deaths);
  w.key("replicas").begin_array();
  for (const auto& r : s.replicas) {
    w.begin_object().field("id", static_cast<int64_t>(r.id)).field("name", r.name).field("state", r.state);
    w.field("in_flight", static_cast<int64_t>(r.in_flight)).field("running", static_cast<int64_t>(r.load.running));
    w.field("waiting", static_cast<int64_t>(r.load.waiting));
    w.field("kv_blocks_available", static_cast<int64_t>(r.load.kv_blocks_available));
    w.field("placed", r.placed).end_object();
  }
  w.end_array().end_object();
  return w.take();
}

}  // namespace troupe::app

#pragma once
// The cluster side of `troupe serve` and `troupe worker` (docs/cluster.md): where the front
// listens for workers, how a worker finds it, and what /health and /metrics say of the replicas.
#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/router/router.hpp"
#include "actors/runtime.hpp"
#include "config/troupe_config.hpp"
#include "common/result.hpp"

namespace troupe::app {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" (HOST may be "[v6]"); `what` names the setting in errors.
result<host_port> parse_host_port(const std::string& s, const std::string& what);
bool is_loopback(const std::string& host);

// The [cluster] keys make sense together: the TLS files all or none (and readable); without TLS
// the front listens on loopback only (plain TCP).
status check_cluster(const config::cluster_options& c);

// The actor system's network settings for a cluster node (TLS when configured).
actors::runtime_options cluster_runtime(const config::cluster_options& c);

// Publishes the front's router at cluster.listen (over TLS when the runtime has it); the port
// bound (0 in listen: any free port).
result<uint16_t> publish_router(caf::actor_system& sys, const caf::actor& router, const config::cluster_options& c);

// A worker's connection to the front's router.
result<actors::router_actor> connect_router(caf::actor_system& sys, const host_port& front, bool tls);

// Prometheus lines (per-replica series with a `replica` label, migration and death counters) and
// /health's "replicas" member.
std::string router_metrics(const actors::router_stats& s);
std::string router_health(const actors::router_stats& s);

}  // namespace troupe::app

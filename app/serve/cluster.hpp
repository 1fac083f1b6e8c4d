#pragma once
// The cluster side of `troupe serve` and `troupe worker` (docs/cluster.md): where the front
// listens for workers, how a worker finds it, and what /health and /metrics say of the replicas.
#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/router/router.hpp"
#include "common/result.hpp"

namespace troupe::app {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" (HOST may be "[v6]"); `what` names the setting in errors.
result<host_port> parse_host_port(const std::string& s, const std::string& what);
bool is_loopback(const std::string& host);

// The link is plain TCP: off loopback, a worker must prove the cluster secret.
status check_cluster_security(const std::string& listen, const std::string& secret);

// Publishes the front's router at cluster.listen; the port bound (0 in listen: any free port).
result<uint16_t> publish_router(caf::actor_system& sys, const caf::actor& router, const std::string& listen);

// Prometheus lines (per-replica series with a `replica` label, migration and death counters) and
// /health's "replicas" member.
std::string router_metrics(const actors::router_stats& s);
std::string router_health(const actors::router_stats& s);

}  // namespace troupe::app

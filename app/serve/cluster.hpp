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
#include "model/llama_model.hpp"

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
// `dead_after_ms`: cluster.dead_after_ms at start; CAF drops a silent link after it too (at least
// 3 s), not after a fixed 3 s below a longer setting.
// The three cluster.tls_* files as CAF's OpenSSL layer will read them: a PEM certificate chain,
// its private key (checked against it) and a PEM CA file.
status check_tls_files(const config::cluster_options& c);

actors::runtime_options cluster_runtime(const config::cluster_options& c, int64_t dead_after_ms);

// Publishes the front's router at cluster.listen (over TLS when the runtime has it); the port
// bound (0 in listen: any free port).
result<uint16_t> publish_router(caf::actor_system& sys, const caf::actor& router, const config::cluster_options& c);

// A worker's connection to the front's router.
result<actors::router_actor> connect_router(caf::actor_system& sys, const host_port& front, bool tls);

// What decides the numbers this node's replica computes (actors::replica_numerics): the model's
// weights ("model.weights", a digest), "model.backend", the quantized matmul order that runs
// ("model.matmul", cpu: after TROUPE_MATMUL_ORDER and this CPU's kernels), "kv.type" (f16, f32,
// q8) and "kv.block_size". The front and every worker make it alike; the router refuses a worker
// whose values differ.
actors::replica_numerics numerics_of(const config::troupe_config& c, const model::llama_model& m);

// Prometheus lines: per-replica series labelled {replica, name} (one series per replica whatever
// its state; its state as a gauge of its own; the load gauges of live replicas only), cluster-wide
// totals over the replicas that serve, and the migration and death counters.
std::string router_metrics(const actors::router_stats& s);
// /health's "router" member.
std::string router_health(const actors::router_stats& s);

}  // namespace troupe::app

#pragma once
// The CAF side of a process that runs a pipeline: every message type registered (they cross
// the network once executors or clients live elsewhere) and the scheduler sized for this
// machine. CAF's default of max(cores, 4) worker threads would compete with the executor's
// own thread pool on small machines.
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace troupe::actors {

// Registers every message type of the pipeline with `cfg`.
void add_message_types(caf::actor_system_config& cfg);

struct runtime_options {
  int scheduler_threads = 0;  // CAF worker threads; 0: 2 (the executor runs on its own thread)
  // Loads CAF's network layer (caf::io's middleman) for a cluster: a front that listens for
  // workers, or a worker. Its heartbeat is off by default in CAF 0.17; a cluster turns it on so
  // that a half-open connection is noticed by CAF too (the router's own rule is the load reports).
  bool network = false;
  int64_t heartbeat_ms = 500;
  // A link silent this long is dropped by CAF: cluster_runtime sets it to cluster.dead_after_ms at
  // start (at least 3 s), so that the router's rule, not CAF's, decides when a node is dead.
  int64_t connection_timeout_ms = 3000;
  // TLS for the cluster's links (CAF's OpenSSL layer, mutual authentication): this node's
  // certificate and key, and the cluster CA that peers' certificates must be signed by. All
  // three or none.
  std::string tls_certificate, tls_key, tls_ca;
  bool tls() const { return !tls_certificate.empty(); }
};

class runtime {
 public:
  explicit runtime(runtime_options o = {});
  ~runtime();
  caf::actor_system& system() { return *sys_; }

 private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
};

}  // namespace troupe::actors

#pragma once
// The whole configuration of `troupe serve`: the structs the code reads, composed. The schema
// (config_schema.cpp) points each key of the TOML file into one of their fields, and
// config/reference.toml documents every key (unit, range, hot-swappable or not).
//
// No defaults are written here, but for the one place where serve's differ from the runtime
// structs' (serve_pipeline_defaults below): each default lives in the struct that holds it.
#include <string>
#include <vector>

#include "actors/supervisor/pipeline_config.hpp"
#include "common/options.hpp"
#include "config/server_options.hpp"
#include "model/backend.hpp"

namespace troupe::config {

// [model]: the file `troupe serve` loads and the backend that runs it. The engine's own
// settings are model::backend_options (troupe_config::backend).
struct model_options {
  std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string name;             // what requests name in `model`; empty: the file name without .gguf
  std::string backend = "cpu";  // a registered backend ("cpu", "cuda")
};

// [cluster]: this process as the front of a cluster (the router's own settings live in
// actors::router_config: local_replica, dead_after_ms, report_ms, secret).
struct cluster_options {
  // host:port where workers join (`troupe worker --join HOST:PORT`); empty: no cluster port.
  // Without TLS it must be a loopback address (docs/cluster.md).
  std::string listen;
  // TLS with mutual authentication (scripts/make-cluster-certs.sh makes them): this node's
  // certificate and key, and the cluster CA every peer's certificate must be signed by. All
  // three or none; the front and every worker set them.
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_ca;
  bool tls() const { return !tls_certificate.empty(); }
};

// [logging]
struct logging_options {
  std::string level = "info";   // spdlog's names: trace, debug, info, warn, error, critical, off
};

// The pipeline `troupe serve` runs when the file says nothing. Every default is the runtime
// structs' own but this one: a server decodes more sequences together than a bare pipeline
// (scheduler_config's 32), so that concurrent clients share steps.
inline actors::pipeline_config serve_pipeline_defaults() {
  actors::pipeline_config p;
  p.scheduler.max_num_seqs = 64;
  return p;
}

struct troupe_config {
  std::vector<std::string> plugins;  // shared libraries loaded at startup (actors/plugins/plugin_loader)
  server_options server;             // [server], and [auth]: api_keys, admin_token
  model_options model;               // [model] path, name, backend
  model::backend_options backend;    // [model] threads, cuda_graphs, matmul; [kv] memory_mib, block_size, f32, q8
  // [scheduler] (and kv.prefix_caching), [admission], [cache], [streamer], [supervisor]. Its
  // model_name, and admission's model_name, n_ctx and n_vocab, are not keys: serve and the
  // pipeline fill them in.
  actors::pipeline_config pipeline = serve_pipeline_defaults();
  logging_options logging;
  cluster_options cluster;           // [cluster] listen; the rest is pipeline.router
};

}  // namespace troupe::config

#pragma once
// `troupe serve` as a library: an actor system, the pipeline over a model loaded in the
// background, and the HTTP/WebSocket server in front (listening at once; /health says
// "loading" until the model is up). Tests start one in process on an ephemeral port.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/response_cache.hpp"
#include "model/result.hpp"
#include "net/inference.hpp"
#include "net/server.hpp"

namespace troupe::actors {
struct pipeline_config;
}
namespace troupe::model {
struct backend_options;
}

namespace troupe::net {

class serve_instance;

struct serve_options {
  server_options server;
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::string model_name;      // what requests name in `model`; empty: the file name without .gguf
  int backend_threads = 0;     // engine threads; 0: all cores
  int64_t kv_mb = 256;         // KV memory
  int32_t max_num_seqs = 64;   // sequences decoded together
  bool response_cache = true;  // the response cache on or off (overrides cache.enabled when false)
  actors::response_cache_config cache;  // policy ("semantic", "exact"), store path, threshold, TTL, ...
  bool quiet = false;          // no startup lines on stdout
  std::string backend = "cpu"; // a registered backend
  // Runs on the pipeline's config and the backend's options once the fields above are applied:
  // the config module (config/serve_config.hpp) sets what has no field here.
  std::function<void(actors::pipeline_config&, model::backend_options&)> configure;
  // Admin actions (POST /admin/reload, GET /admin/config, SIGHUP as "reload"): run on a thread of
  // their own; answer an HTTP status and a JSON body. Unset: /admin answers 404.
  std::function<inference::admin_reply(serve_instance&, const std::string& action)> admin;
  // Prometheus lines about the config (its version), appended to /metrics.
  std::function<std::string()> config_metrics;
};

class serve_instance {
 public:
  // Binds the listening socket and starts loading the model; returns once listening.
  static result<std::unique_ptr<serve_instance>> start(serve_options o);
  ~serve_instance();

  uint16_t port() const;
  bool ready() const;
  // Waits until the model is loaded (true) or failed / timed out (false; see load_error()).
  bool wait_ready(std::chrono::milliseconds timeout);
  std::string load_error() const;
  // Hot reload: `edit` changes a copy of the running pipeline's config; the actors whose
  // settings changed are replaced while serving (actors::pipeline::reconfigure). Answers the
  // names of the actors replaced, or why nothing was.
  result<std::vector<std::string>> reconfigure(const std::function<void(actors::pipeline_config&)>& edit);
  // Runs an admin action as /admin does (for SIGHUP).
  inference::admin_reply admin(const std::string& action);
  // Graceful shutdown (server::begin_drain): no new requests; in_flight() counts the running ones.
  void begin_drain();
  int64_t in_flight() const;
  // Stops the server, then the pipeline. Idempotent.
  void stop();

  struct impl;

 private:
  explicit serve_instance(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

// Runs until SIGINT or SIGTERM; returns the process exit code.
int run_serve(const serve_options& o);

}  // namespace troupe::net

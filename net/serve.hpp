#pragma once
// `troupe serve` as a library: an actor system, the pipeline over a model loaded in the
// background, and the HTTP/WebSocket server in front (listening at once; /health says
// "loading" until the model is up). Tests start one in process on an ephemeral port.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/response_cache.hpp"
#include "model/result.hpp"
#include "net/server.hpp"

namespace troupe::actors {
struct pipeline_config;
}
namespace troupe::model {
struct backend_options;
}

namespace troupe::net {

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

#pragma once
// `troupe serve` as a library: an actor system, the pipeline over a model loaded in the
// background, and the HTTP/WebSocket server in front (listening at once; /health says
// "loading" until the model is up). Tests start one in process on an ephemeral port.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/troupe_config.hpp"
#include "net/inference.hpp"
#include "net/server.hpp"

namespace troupe::model {
class llama_model;
}

namespace troupe::app {

class serve_instance;

struct serve_options {
  // Everything the config file and the flags say: the server's options, the model and backend,
  // the pipeline's config (config/troupe_config.hpp; the defaults are the runtime structs').
  config::troupe_config config;
  bool quiet = false;          // no startup lines on stdout
  // Admin actions (POST /admin/reload, GET /admin/config, SIGHUP as "reload"): run on a thread of
  // their own; answer an HTTP status and a JSON body. Unset: /admin answers 404.
  std::function<net::inference::admin_reply(serve_instance&, const std::string& action)> admin;
  // Prometheus lines about the config (its version), appended to /metrics.
  std::function<std::string()> config_metrics;
  // Reads the model on the loader thread; unset: model::llama_model::load(config.model.path).
  // Tests put a slow or stuck load here.
  std::function<result<std::shared_ptr<model::llama_model>>(const std::string& path)> load_model;
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
  // True once the loader has finished, loaded or failed; stop() waits for it until then.
  bool load_finished() const;
  // Hot reload: the pipeline stages in `stages` are replaced with their settings in `next`
  // while serving (actors::pipeline::reconfigure). Answers the names of the actors replaced, or
  // why nothing was.
  result<std::vector<std::string>> reconfigure(const actors::pipeline_config& next, const std::set<std::string>& stages);
  // The workers (replicas on other hosts) in the cluster now, by name: a reload of this process
  // does not reach them.
  std::vector<std::string> workers();
  // Runs an admin action as /admin does (for SIGHUP).
  net::inference::admin_reply admin(const std::string& action);
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

}  // namespace troupe::app

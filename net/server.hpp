#pragma once
// The HTTP + WebSocket server (Boost.Beast), as a plain object: start() binds and runs the I/O
// threads, stop() ends them. Beast stays inside server.cpp, http_session*.cpp and ws_session.cpp;
// this header has none of it, so CAF translation units (app/serve/serve.cpp) can hold a server
// cheaply.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/server_options.hpp"
#include "net/inference.hpp"
#include "net/metrics.hpp"

namespace troupe::net {

// Defined in config/ (the config schema describes it); the server takes it as it is.
using config::server_options;

class server {
 public:
  server(server_options o, inference& inf, metrics& m);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds, listens and starts the I/O threads. The error names the address.
  status start();
  // The bound port (after start).
  uint16_t port() const;
  // Stops accepting, ends the I/O threads. Idempotent.
  void stop();
  // Graceful shutdown, first half: stops accepting connections; requests that arrive on open
  // ones get 503 shutting_down (WebSocket: an error frame), /health says "draining". Running
  // requests go on; in_flight() counts them down. Then stop().
  void begin_drain();
  int64_t in_flight() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::net

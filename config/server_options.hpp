#pragma once
// The HTTP + WebSocket server's settings ([server] and [auth] of the config file). Defined here,
// below net/, so that the config schema can describe them directly; net::server takes them as
// they are. Every default lives here.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::config {

struct server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;                         // 0: any free port (see net::server::port())
  int io_threads = 1;                           // Asio threads serving every connection
  std::vector<std::string> api_keys;            // empty: no authentication
  std::vector<std::string> api_key_tenants;     // the tenant of each key (admission's limits); empty: key<N>
  std::string admin_token;                      // /admin/* needs `Authorization: Bearer <it>`; empty: /admin off
  size_t max_body_bytes = 1 << 20;              // larger HTTP bodies: 413
  size_t max_ws_message_bytes = 1 << 20;        // larger WebSocket messages: close 1009
  size_t max_ws_queue_bytes = 8 << 20;          // unsent bytes per socket before its streams end (slow_consumer)
  std::chrono::seconds ws_idle_timeout{30};     // ping after half of it, close after it without a pong
  // An HTTP request (headers and body) must arrive within it, counted from the end of the
  // previous response on a keep-alive connection (so it is also the idle limit): slow or stalled
  // senders do not hold connections for long.
  std::chrono::seconds http_read_timeout{30};
  // SIGTERM / SIGINT: how long running requests may take to finish before the server stops
  // anyway (a second signal stops it at once).
  std::chrono::seconds shutdown_grace{20};
  std::chrono::milliseconds resume_window{60000};  // how long ended / orphaned WebSocket streams stay resumable
  size_t resume_keep_tokens = 4096;             // tokens kept per stream for resumption

  // The tenant of api_keys[idx].
  std::string tenant_of(int idx) const {
    const auto i = static_cast<size_t>(idx);
    if (i < api_key_tenants.size() && !api_key_tenants[i].empty()) return api_key_tenants[i];
    return "key" + std::to_string(idx);
  }
};

}  // namespace troupe::config

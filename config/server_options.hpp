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
  // A stream's token frames count as consumed (acknowledged to the streamer) only while the
  // client's unread bytes (the socket's send queue plus the session's queue) stay under this; over
  // it the streamer pauses the sequence after streamer.buffer_tokens. 0: no bound (only a socket
  // that blocks holds acknowledgements). WebSocket and SSE streams.
  size_t max_unread_kib = 256;
  // A WebSocket on which the client sent no frame (other than pongs) for this long, with no stream
  // of it running, is closed (1001). Keep-alive pings go out every min(it, 60 s) / 2, and a peer that
  // answers none within min(it, 60 s) is gone.
  std::chrono::seconds ws_idle_timeout{300};
  // Connections open at once (HTTP and WebSocket); above it new ones get 503 and are closed. The
  // server lowers it to fit the process's descriptor limit (RLIMIT_NOFILE less a reserve).
  size_t max_connections = 10000;
  size_t max_connections_per_client = 1024;     // the same, per remote address
  size_t max_streams_per_connection = 128;      // WebSocket streams running at once on one socket
  // Origins (scheme://host[:port]) whose pages may use the server: requests carrying another
  // `Origin` get 403, WebSocket upgrades included; CORS headers go only to these. Empty: the
  // server's own origin (the request's Host) and localhost / 127.0.0.1 / [::1] on any port.
  // "*": any origin.
  std::vector<std::string> allowed_origins;
  // Host names (a `Host` header's host part, no port) requests may name (DNS rebinding defence):
  // others get 421. Empty: the listen address and localhost / 127.0.0.1 / [::1]; listening on
  // 0.0.0.0 or ::, any. "*": any.
  std::vector<std::string> allowed_hosts;
  // An HTTP request (headers and body) must arrive within it, counted from the end of the
  // previous response on a keep-alive connection (so it is also the idle limit): slow or stalled
  // senders do not hold connections for long.
  std::chrono::seconds http_read_timeout{30};
  // SIGTERM / SIGINT: how long running requests may take to finish before the server stops
  // anyway (a second signal stops it at once).
  std::chrono::seconds shutdown_grace{20};
  // TLS (HTTPS and WSS): a PEM certificate chain and its PEM private key. Both set: the port
  // serves TLS only; both empty: plain HTTP only. Loaded at start.
  std::string tls_cert;
  std::string tls_key;
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

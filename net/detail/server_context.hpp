#pragma once
// Shared by the Beast translation units (server.cpp, http_session.cpp,
// http_session_completion.cpp, ws_session.cpp): what every session needs, and how one session
// hands a connection to the next.
#include <atomic>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/inference.hpp"
#include "net/metrics.hpp"
#include "net/request_guard.hpp"
#include "net/responses_store.hpp"
#include "net/resume_store.hpp"
#include "net/server.hpp"

namespace boost::asio::ssl {
class context;
}

namespace troupe::net::detail {

class conn_stream;  // net/detail/conn_stream.hpp

struct server_context {
  server_context(server_options o, inference& i, metrics& m) :
      opts(std::move(o)), inf(i), met(m), resumes(opts.resume_window, opts.resume_keep_tokens),
      guard({opts.host, opts.allowed_hosts, opts.allowed_origins}), max_connections(opts.max_connections) {}
  server_options opts;
  inference& inf;
  metrics& met;
  resume_store resumes;
  responses_store responses;  // the Responses API's stored responses (store: true)
  request_guard guard;
  // opts.max_connections, lowered by server::start to fit the descriptor limit.
  size_t max_connections;
  boost::asio::io_context ioc;
  // Shutting down (server::begin_drain): no new request is taken, running ones may finish.
  std::atomic<bool> draining{false};
  // Requests being handled: from the moment a session starts on one until its answer's last
  // bytes are written (or its connection is gone). A drain waits for this to reach 0.
  std::atomic<int64_t> in_flight{0};
  // When this server started (Unix seconds): /v1/models' `created`, the same on every call.
  const int64_t started_at = static_cast<int64_t>(std::time(nullptr));

  // A connection from `client` (its address) counted for as long as the returned handle lives;
  // nullptr, with `why` set, when it would pass max_connections or max_connections_per_client.
  std::shared_ptr<void> open_connection(const std::string& client, std::string& why) {
    std::lock_guard<std::mutex> lock(connections_mu);
    if (connections >= max_connections) {
      why = "the server has its maximum of " + std::to_string(max_connections) +
            " connections open (server.max_connections); retry shortly";
      return nullptr;
    }
    auto& mine = per_client[client];
    if (mine >= opts.max_connections_per_client) {
      why = "this address has its maximum of " + std::to_string(opts.max_connections_per_client) +
            " connections open (server.max_connections_per_client); close some first";
      return nullptr;
    }
    ++connections;
    ++mine;
    // Not null: a slot is told from a refusal (no slot) by its pointer.
    return std::shared_ptr<void>(static_cast<void*>(this), [this, client](void*) {
      std::lock_guard<std::mutex> lock(connections_mu);
      --connections;
      auto it = per_client.find(client);
      if (it != per_client.end() && --it->second == 0) per_client.erase(it);
    });
  }
  size_t open_connections() const {
    std::lock_guard<std::mutex> lock(connections_mu);
    return connections;
  }
  // Connections being refused (answered 503, then closed): bounded, so that a flood of them does
  // not use up the descriptors the limit is there to keep.
  std::atomic<int> refusing{0};

  // One request in flight for as long as the returned handle (or a copy) lives.
  std::shared_ptr<void> flight() {
    in_flight.fetch_add(1);
    return std::shared_ptr<void>(nullptr, [this](void*) { in_flight.fetch_sub(1); });
  }

 private:
  mutable std::mutex connections_mu;
  size_t connections = 0;
  std::unordered_map<std::string, size_t> per_client;
};

// Takes over an accepted connection (the listener calls it). `slot` is its place among the open
// connections (server_context::open_connection); without one the connection is refused: its
// request is answered 503 (a WebSocket upgrade: close 1013) with `refusal`, then it closes.
// `tls` (server.tls_cert): the connection starts with a TLS handshake; null: plain HTTP.
void start_http_session(server_context& ctx, boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls,
                        std::shared_ptr<void> slot, std::string refusal);

// Takes over an upgraded connection. `owner` is the API key (resumption is per key), `tenant`
// the admission tenant; `authed` is false when keys are configured and the upgrade request
// carried none (the client must send an `auth` frame first). `slot`: see start_http_session; a
// non-empty `refusal` accepts the upgrade only to close it at once (1013, try again later).
void start_ws_session(server_context& ctx, conn_stream stream,
                      boost::beast::http::request<boost::beast::http::string_body> req, std::string owner,
                      std::string tenant, bool authed, std::shared_ptr<void> slot, std::string refusal = {});

}  // namespace troupe::net::detail

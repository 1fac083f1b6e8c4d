#pragma once
// Shared by the Beast translation units (server.cpp, http_session.cpp, ws_session.cpp): what
// every session needs, and how one session hands a connection to the next.
#include <atomic>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "net/inference.hpp"
#include "net/metrics.hpp"
#include "net/resume_store.hpp"
#include "net/server.hpp"

namespace troupe::net::detail {

struct server_context {
  server_context(server_options o, inference& i, metrics& m) :
      opts(std::move(o)), inf(i), met(m), resumes(opts.resume_window, opts.resume_keep_tokens) {}
  server_options opts;
  inference& inf;
  metrics& met;
  resume_store resumes;
  boost::asio::io_context ioc;
  // Shutting down (server::begin_drain): no new request is taken, running ones may finish.
  std::atomic<bool> draining{false};
  // Requests being handled: from the moment a session starts on one until its answer's last
  // bytes are written (or its connection is gone). A drain waits for this to reach 0.
  std::atomic<int64_t> in_flight{0};

  // One request in flight for as long as the returned handle (or a copy) lives.
  std::shared_ptr<void> flight() {
    in_flight.fetch_add(1);
    return std::shared_ptr<void>(nullptr, [this](void*) { in_flight.fetch_sub(1); });
  }
};

// Takes over an accepted connection (the listener calls it).
void start_http_session(server_context& ctx, boost::asio::ip::tcp::socket socket);

// Takes over an upgraded connection. `owner` is the API key (resumption is per key), `tenant`
// the admission tenant; `authed` is false when keys are configured and the upgrade request
// carried none (the client must send an `auth` frame first).
void start_ws_session(server_context& ctx, boost::beast::tcp_stream stream,
                      boost::beast::http::request<boost::beast::http::string_body> req, std::string owner,
                      std::string tenant, bool authed);

}  // namespace troupe::net::detail

#pragma once
// The stream one connection's HTTP and WebSocket sessions run over: plain TCP, or TLS over TCP
// when server.tls_cert / server.tls_key are set. One type with a switch chosen at accept, rather
// than the sessions as templates on the stream type: the sessions are the two heaviest Beast
// translation units on a 2-core build, and this way each is compiled once; only the calls below
// know about TLS. It is an AsyncStream (async_read_some / async_write_some / get_executor), so
// Beast's HTTP reads and writes and websocket::stream take it as they take a beast::tcp_stream.
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl.hpp>  // ssl_stream, and its WebSocket teardown
#include <boost/beast/websocket/teardown.hpp>

#include <chrono>
#include <optional>
#include <utility>

namespace troupe::net::detail {

class conn_stream {
 public:
  using tcp_stream = boost::beast::tcp_stream;
  using tls_stream = boost::beast::ssl_stream<tcp_stream>;
  using executor_type = tcp_stream::executor_type;

  // `tls` null: plain TCP.
  conn_stream(boost::asio::ip::tcp::socket&& s, boost::asio::ssl::context* tls) {
    if (tls)
      tls_.emplace(std::move(s), *tls);
    else
      tcp_.emplace(std::move(s));
  }

  bool is_tls() const { return tls_.has_value(); }
  tls_stream& tls() { return *tls_; }
  // The TCP stream under it (its timeouts and its socket). Named next_layer so that
  // beast::get_lowest_layer finds it.
  tcp_stream& next_layer() { return tls_ ? tls_->next_layer() : *tcp_; }
  boost::asio::ip::tcp::socket& socket() { return next_layer().socket(); }
  executor_type get_executor() { return next_layer().get_executor(); }
  void expires_after(std::chrono::steady_clock::duration d) { next_layer().expires_after(d); }
  void expires_never() { next_layer().expires_never(); }

  // Through TLS when it is on; the tcp_stream's timeout applies either way.
  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& b, Handler&& h) {
    if (tls_)
      tls_->async_read_some(b, std::forward<Handler>(h));
    else
      tcp_->async_read_some(b, std::forward<Handler>(h));
  }
  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& b, Handler&& h) {
    if (tls_)
      tls_->async_write_some(b, std::forward<Handler>(h));
    else
      tcp_->async_write_some(b, std::forward<Handler>(h));
  }
  // A read that no timeout ends (the watch for a client going away while its answer is worked
  // on): the bare socket for TCP, TLS over the tcp_stream (whose timer is off then) for TLS.
  template <class MutableBuffers, class Handler>
  void async_read_untimed(const MutableBuffers& b, Handler&& h) {
    if (tls_)
      tls_->async_read_some(b, std::forward<Handler>(h));
    else
      tcp_->socket().async_read_some(b, std::forward<Handler>(h));
  }

  // WebSocket closing handshake's end (found by argument-dependent lookup from websocket::stream).
  friend void teardown(boost::beast::role_type role, conn_stream& s, boost::beast::error_code& ec) {
    using boost::beast::websocket::teardown;
    if (s.tls_)
      teardown(role, *s.tls_, ec);
    else
      teardown(role, *s.tcp_, ec);
  }
  template <class Handler>
  friend void async_teardown(boost::beast::role_type role, conn_stream& s, Handler&& h) {
    using boost::beast::websocket::async_teardown;
    if (s.tls_)
      async_teardown(role, *s.tls_, std::forward<Handler>(h));
    else
      async_teardown(role, *s.tcp_, std::forward<Handler>(h));
  }

 private:
  std::optional<tcp_stream> tcp_;  // exactly one of the two is set
  std::optional<tls_stream> tls_;
};

}  // namespace troupe::net::detail

// The listener and the server object: loads the TLS context when configured, binds, accepts (each
// connection goes to an HTTP session, http_session.cpp, over TCP or TLS), runs the I/O threads, sweeps the resume store, drains and stops.
#include "net/server.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/error.hpp>

#include <sys/resource.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "net/detail/server_context.hpp"
#include "net/tls_context.hpp"

namespace troupe::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using detail::server_context;

namespace {

class listener : public std::enable_shared_from_this<listener> {
 public:
  // The acceptor runs on a strand (see server::start), and so do its backoff timer and close():
  // with several I/O threads they would otherwise race.
  // `tls`: every connection is TLS (server.tls_cert); null: plain HTTP.
  listener(server_context& ctx, tcp::acceptor&& a, asio::ssl::context* tls) :
      ctx_(ctx), acceptor_(std::move(a)), backoff_timer_(acceptor_.get_executor()), tls_(tls) {}
  void accept() {
    acceptor_.async_accept(asio::make_strand(ctx_.ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
      if (!self->acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE/ENFILE) or memory: the pending connection stays queued and
        // an immediate retry fails the same way, spinning a core. Wait, 10 ms doubling to 1 s,
        // while connections close and free descriptors.
        self->backoff_ = std::min(std::max(self->backoff_ * 2, std::chrono::milliseconds(10)), std::chrono::milliseconds(1000));
        self->log_accept_failure(ec);
        self->backoff_timer_.expires_after(self->backoff_);
        self->backoff_timer_.async_wait([self](beast::error_code) {
          if (self->acceptor_.is_open()) self->accept();
        });
        return;
      }
      self->backoff_ = std::chrono::milliseconds(0);
      beast::error_code ignored;
      s.set_option(tcp::no_delay(true), ignored);  // see CAF-0.17-NOTES: Nagle + delayed ACK cost ~40 ms
      const auto peer = s.remote_endpoint(ignored);
      std::string why;
      auto slot = self->ctx_.open_connection(ignored ? std::string("?") : peer.address().to_string(), why);
      if (!slot && self->ctx_.refusing.load() >= max_refusing) {
        s.close(ignored);  // refusals flood in: no answer, the descriptor back at once
      } else {
        detail::start_http_session(self->ctx_, std::move(s), self->tls_, std::move(slot), std::move(why));
      }
      self->accept();
    });
  }
  // Call on the acceptor's strand (post to executor()).
  void close() {
    beast::error_code ec;
    acceptor_.close(ec);
    backoff_timer_.cancel();
  }
  asio::any_io_executor executor() { return acceptor_.get_executor(); }
  static constexpr int max_refusing = 64;
  uint16_t port() const {
    beast::error_code ec;
    return acceptor_.local_endpoint(ec).port();
  }

 private:
  // One line per 10 s at most: a flood of failures would otherwise flood the log.
  void log_accept_failure(const beast::error_code& ec) {
    const auto now = std::chrono::steady_clock::now();
    ++failures_;
    if (last_log_ && now - *last_log_ < std::chrono::seconds(10)) return;
    last_log_ = now;
    const bool fds = ec == asio::error::no_descriptors || ec.value() == ENFILE;
    std::fprintf(stderr, "troupe serve: accepting a connection failed %llu time(s): %s%s (%zu connections open); "
                 "retrying in %lld ms\n",
                 static_cast<unsigned long long>(failures_), ec.message().c_str(),
                 fds ? " -- out of file descriptors: raise `ulimit -n` or lower server.max_connections" : "",
                 ctx_.open_connections(), static_cast<long long>(backoff_.count()));
    failures_ = 0;
  }

  server_context& ctx_;
  tcp::acceptor acceptor_;
  asio::steady_timer backoff_timer_;
  std::chrono::milliseconds backoff_{0};
  std::optional<std::chrono::steady_clock::time_point> last_log_;
  uint64_t failures_ = 0;
  asio::ssl::context* tls_;
};

// Descriptors kept for what is not a connection (model and cache files, RocksDB, the cluster
// port, logs): max_connections is lowered so that the limit is reached before EMFILE.
constexpr rlim_t reserved_descriptors = 128;

}  // namespace

struct server::impl {
  impl(server_options o, inference& inf, metrics& m) : ctx(std::move(o), inf, m), sweeper(ctx.ioc) {}
  server_context ctx;
  asio::steady_timer sweeper;
  std::shared_ptr<listener> lis;
  std::shared_ptr<asio::ssl::context> tls;  // server.tls_cert / tls_key loaded; null: plain HTTP
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  uint16_t port = 0;
  bool stopped = false;

  void sweep() {
    sweeper.expires_after(std::chrono::seconds(1));
    sweeper.async_wait([this](beast::error_code ec) {
      if (ec) return;
      ctx.resumes.sweep();
      sweep();
    });
  }
};

server::server(server_options o, inference& inf, metrics& m) : impl_(std::make_unique<impl>(std::move(o), inf, m)) {}

server::~server() { stop(); }

status server::start() {
  auto& c = impl_->ctx;
  // TLS only when configured, and then TLS only: no plain-HTTP port beside it (a plain request
  // gets a 400 saying so, http_session.cpp).
  if (!c.opts.tls_cert.empty() || !c.opts.tls_key.empty()) {
    auto tls = load_tls_context(c.opts.tls_cert, c.opts.tls_key);
    if (!tls) return make_error(tls.error());
    impl_->tls = std::move(*tls);
  }
  beast::error_code ec;
  auto addr = asio::ip::make_address(c.opts.host, ec);
  if (ec) return make_error("cannot listen on '" + c.opts.host + "': not an IP address (" + ec.message() + ")");
  tcp::endpoint ep(addr, c.opts.port);
  tcp::acceptor acc(asio::make_strand(c.ioc));
  const std::string where = c.opts.host + ":" + std::to_string(c.opts.port);
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error("cannot listen on " + where + ": " + ec.message());
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const rlim_t room = nofile.rlim_cur > 2 * reserved_descriptors ? nofile.rlim_cur - reserved_descriptors
                                                                   : nofile.rlim_cur / 2;
    if (room < c.max_connections) {
      std::fprintf(stderr,
                   "troupe serve: server.max_connections is %zu but the descriptor limit (ulimit -n) is %llu: "
                   "taking at most %llu connections\n",
                   c.max_connections, static_cast<unsigned long long>(nofile.rlim_cur),
                   static_cast<unsigned long long>(room));
      c.max_connections = static_cast<size_t>(std::max<rlim_t>(1, room));
    }
  }
  impl_->lis = std::make_shared<listener>(c, std::move(acc), impl_->tls.get());
  impl_->port = impl_->lis->port();
  impl_->lis->accept();
  impl_->sweep();
  impl_->work.emplace(c.ioc.get_executor());
  const int n = std::max(1, c.opts.io_threads);
  for (int i = 0; i < n; ++i) impl_->threads.emplace_back([this] { impl_->ctx.ioc.run(); });
  return {};
}

uint16_t server::port() const { return impl_->port; }

void server::begin_drain() {
  if (!impl_ || impl_->stopped) return;
  impl_->ctx.draining = true;
  if (impl_->lis) asio::post(impl_->lis->executor(), [l = impl_->lis] { l->close(); });
}

int64_t server::in_flight() const { return impl_ ? impl_->ctx.in_flight.load() : 0; }

void server::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->lis) asio::post(impl_->lis->executor(), [l = impl_->lis] { l->close(); });
  impl_->work.reset();
  impl_->ctx.ioc.stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

}  // namespace troupe::net

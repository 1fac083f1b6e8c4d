// The HTTP session of one connection (the listener, server.cpp, hands it over): routing, the
// OpenAI-compatible endpoints (plain JSON and server-sent events), /v1/embeddings, /tokenize
// and /detokenize, /health, /metrics, /v1/models, /admin, the chat page, and the upgrade to
// WebSocket (ws_session.cpp). Each
// connection runs on its own strand; pipeline events arrive on actor threads and are posted
// onto it, so a session's state is only touched on its strand.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>

#include "net/auth.hpp"
#include "net/chat_page.hpp"
#include "net/completion_assembly.hpp"
#include "net/detail/conn_stream.hpp"
#include "net/detail/server_context.hpp"
#include "net/detail/unread_gate.hpp"
#include "net/http_routes.hpp"
#include "net/openai_codec.hpp"
#include "net/tokenize_codec.hpp"

namespace troupe::net::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// A request target's path (net/http_routes.hpp takes std::string_view; Beast's may be Boost's).
std::string path_of(beast::string_view target) { return strip_query(std::string_view(target.data(), target.size())); }

// After an answer that closes the connection, the unread rest of the request (a body over the
// limit, or one that was refused before it was read) is read and dropped, up to this many bytes
// and for at most linger_time, before the socket closes: closing with unread bytes makes the
// kernel send a reset, which can destroy the answer before the client reads it (a client still
// sending its body would see a broken pipe instead of the 413).
constexpr size_t linger_bytes = 16 << 20;
constexpr std::chrono::seconds linger_time{5};

class http_session : public std::enable_shared_from_this<http_session> {
 public:
  http_session(server_context& ctx, tcp::socket&& s, asio::ssl::context* tls, std::shared_ptr<void> slot,
               std::string refusal) :
      ctx_(ctx), stream_(std::move(s), tls), slot_(std::move(slot)), refusal_(std::move(refusal)),
      gate_(stream_.get_executor(), stream_.socket().native_handle(), ctx.opts.max_unread_kib * 1024,
            [this] { return queued_bytes_; }) {
    ctx_.met.connection_opened(false);
    if (!slot_) ctx_.refusing.fetch_add(1);
  }
  ~http_session() {
    ctx_.met.connection_closed(false);
    if (!slot_) ctx_.refusing.fetch_sub(1);
    if (!completion_.ended()) request_.cancel();
  }

  void run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->stream_.is_tls()) return self->handshake();
      self->do_read();
    });
  }

 private:
  // ---- TLS (server.tls_cert) ---------------------------------------------------------------
  // The handshake has the time a request has to arrive (a stalled one is a slow-loris too).
  void handshake() {
    stream_.expires_after(read_time());
    stream_.tls().async_handshake(asio::ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
      if (!ec) return self->do_read();
      // Plain HTTP sent to the TLS port: answered in plain HTTP, as nginx does, so that the
      // client learns what is wrong instead of seeing a reset.
      if (ec.category() == asio::error::get_ssl_category() && ERR_GET_REASON(ec.value()) == SSL_R_HTTP_REQUEST)
        return self->refuse_plain_http();
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
  }

  void refuse_plain_http() {
    endpoint_ = "other";
    ctx_.met.count_request(endpoint_, "400");
    const std::string body = error_json(bad_status(
        400, "this port serves HTTPS only (server.tls_cert is set): use https:// (wss:// for WebSocket)",
        "plain_http_to_tls_port"));
    plain_answer_ = "HTTP/1.1 400 Bad Request\r\nServer: troupe\r\nContent-Type: application/json\r\n"
                    "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    closed_ = true;  // no TLS from here on: the bare socket, then the linger as for any refusal
    asio::async_write(stream_.socket(), asio::buffer(plain_answer_), [self = shared_from_this()](beast::error_code ec, size_t) {
      beast::error_code ignored;
      if (ec) {
        self->stream_.socket().close(ignored);
        return;
      }
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->linger();
    });
  }

  std::chrono::seconds read_time() const {
    return refusal_.empty() ? ctx_.opts.http_read_timeout
                            : std::min<std::chrono::seconds>(ctx_.opts.http_read_timeout, linger_time);
  }

  // ---- reading and routing ----------------------------------------------------------------
  void do_read() {
    // RFC 9112 2.2: empty lines before a request line are ignored (some clients send a CRLF after
    // a POST's body), where they have arrived with what came before.
    while (buffer_.size() >= 2 && std::string_view(static_cast<const char*>(buffer_.data().data()), 2) == "\r\n")
      buffer_.consume(2);
    if (peer_closed_ && buffer_.size() == 0) return close();  // nothing more can come
    endpoint_ = "other";  // until the header names one (on_header)
    if (peer_closed_) {
      // The client half-closed after part of a pipelined request: nothing more will come (and
      // the socket's end was read once, so a read would only wait for the timeout). A header
      // still unfinished is answered at once.
      const auto held = beast::buffers_to_string(buffer_.data());
      if (held.find("\r\n\r\n") == std::string::npos) {
        keep_alive_ = false;
        head_request_ = false;
        return send_error(half_closed_inside_request());
      }
    }
    parser_.emplace();
    parser_->body_limit(ctx_.opts.max_body_bytes);
    parser_->header_limit(16 * 1024);
    // Stalled senders and idle keep-alives go; a refused connection gets a few seconds at most.
    // A request begun and not finished in time is answered 408 (read_timer_); the stream's own
    // timeout, a little later, is the backstop that closes the socket whatever happens.
    header_done_ = false;
    stream_.expires_after(read_time() + std::chrono::seconds(2));
    reading_ = true;
    read_timer_.expires_after(read_time());
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->reading_) return;
      self->read_timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);  // the read's handler answers (on_read)
    });
    // The header first: what it says decides whether the body is read at all.
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    // A refusal counts under the endpoint the request was sent to once its request line is read
    // (413 on Content-Length, 431, a malformed field, a refused Transfer-Encoding or Host).
    if (!parser_->get().target().empty()) endpoint_ = endpoint_of(path_of(parser_->get().target()));
    if (ec) return on_read(ec);
    header_done_ = true;
    const auto& h = parser_->get();
    keep_alive_ = h.keep_alive();
    version_ = h.version();
    if (!refusal_.empty()) {
      stop_read_timer();
      return refuse(h);
    }
    if (auto e = check_header(h)) {
      keep_alive_ = false;  // the body (if any) stays unread: this connection cannot go on
      stop_read_timer();
      return send_error(*e);
    }
    if (parser_->is_done()) return on_read({});
    auto read_body = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code ec, size_t) { self->on_read(ec); });
    };
    // `Expect: 100-continue` (curl sends it for bodies over 1 KiB): the client waits for a 100
    // before it sends the body (curl a second, others longer). A body over the limit is refused
    // first, without one (Beast's parser checks Content-Length against body_limit on the header).
    const auto expect = h[http::field::expect];
    if (version_ >= 11 && beast::iequals(beast::string_view(expect.data(), expect.size()), "100-continue")) {
      if (refused_on_header(h)) {
        // Refused on the header alone: the final status instead of the 100, so that the body
        // is never sent (RFC 9110 10.1.1), and the connection closes (its body is unread).
        stop_read_timer();
        auto req = parser_->release();
        req.keep_alive(false);
        return handle(std::move(req));
      }
      static constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(stream_, asio::buffer(k_continue.data(), k_continue.size()),
                               [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
                                 if (ec) return self->close();
                                 read_body();
                               });
    }
    read_body();
  }

  // Whether handle() will refuse the request whatever its body: an unknown path, a method the
  // path does not take, or a JSON endpoint without a valid API key.
  bool refused_on_header(const http::request_parser<http::string_body>::value_type& h) {
    const std::string path = path_of(h.target());
    const char* allowed = allowed_methods(path);
    if (!allowed) return true;
    if (std::string_view(allowed) == "POST" && h.method() != http::verb::post) return true;
    return json_endpoint(path) && !authorise(h);
  }

  // Framing, the Host and the Origin, before the body is read (net/request_guard.hpp).
  std::optional<api_error> check_header(const http::request_parser<http::string_body>::value_type& h) {
    const auto te = h[http::field::transfer_encoding];
    if (auto e = request_guard::check_transfer_encoding(std::string_view(te.data(), te.size()))) return e;
    const auto host = h[http::field::host];
    const std::string_view host_v(host.data(), host.size());
    if (auto e = ctx_.guard.check_host(host_v, h.find(http::field::host) != h.end(), h.version())) return e;
    const auto origin = h[http::field::origin];
    const std::string_view origin_v(origin.data(), origin.size());
    if (auto e = ctx_.guard.check_origin(origin_v, host_v)) return e;
    cors_origin_ = std::string(origin_v);  // allowed (or none): answers carry CORS headers for it
    const std::string path = path_of(h.target());
    if (h.method() == http::verb::post && json_endpoint(path)) {
      const auto ct = h[http::field::content_type];
      if (auto e = request_guard::check_json_content_type(std::string_view(ct.data(), ct.size()))) {
        endpoint_ = json_endpoint(path);  // a 415 counts under its endpoint, as a 400 there does
        return e;
      }
    }
    return std::nullopt;
  }

  // A connection over max_connections (or the per-client limit): 503, or for a WebSocket upgrade
  // a close frame (1013, try again later), then closed.
  void refuse(const http::request_parser<http::string_body>::value_type& h) {
    endpoint_ = "other";
    keep_alive_ = false;
    if (beast::websocket::is_upgrade(h) && parser_->is_done()) {
      auto req = parser_->release();
      return start_ws_session(ctx_, std::move(stream_), std::move(req), {}, {}, false, nullptr, refusal_);
    }
    retry_after_s_ = 1;
    api_error e = bad_status(503, refusal_, "too_many_connections");
    e.type = "server_error";
    send_error(e);
  }

  // The request is read (or will not be): its deadline no longer applies.
  void stop_read_timer() {
    reading_ = false;
    read_timer_.cancel();
  }

  void on_read(beast::error_code ec) {
    stop_read_timer();
    if (std::exchange(read_timed_out_, false) && ec) {
      // Nothing of a next request: an idle keep-alive or a silent connection just closes. A
      // request begun (part of its header, or its body unfinished) is told why (RFC 9110 15.5.9).
      if (!refusal_.empty() || (!header_done_ && buffer_.size() == 0 && !parser_->got_some())) return close();
      keep_alive_ = false;
      return send_error(bad_status(408,
                                   std::string("the request did not arrive in full within ") +
                                       std::to_string(ctx_.opts.http_read_timeout.count()) +
                                       " s (server.http_read_timeout_s)",
                                   "request_timeout"));
    }
    if (ec == http::error::end_of_stream) {
      if (buffer_.size() == 0) return close();  // between requests: the client is done
      // Part of a request (a pipelined one the parser had not begun on), then the end.
      keep_alive_ = false;
      head_request_ = false;
      return send_error(half_closed_inside_request());
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      api_error e = bad_status(413, "the body is larger than " + std::to_string(ctx_.opts.max_body_bytes) +
                                       " bytes (server.max_body_bytes)", "body_too_large");
      e.param = "body";
      return send_error(e);
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      endpoint_ = "other";
      return send_error(bad_status(431, "the request headers are larger than 16384 bytes", "headers_too_large"));
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category()) {
      keep_alive_ = false;
      return send_error(bad_status(400, "malformed HTTP request: " + ec.message(), "bad_http"));
    }
    if (ec) return close();
    handle(parser_->release());
  }

  static api_error half_closed_inside_request() {
    return bad_status(400, "the client closed its side of the connection inside a request's header", "bad_http");
  }

  static api_error bad_status(int status, std::string message, std::string code) {
    api_error e = bad_request(std::move(message), {}, std::move(code));
    e.status = status;
    return e;
  }

  // The tenant and owner of an authorised request; nullopt when keys are configured and the
  // request has none or a wrong one.
  std::optional<std::pair<std::string, std::string>> authorise(const http::request<http::string_body>& req) {
    const auto h = req[http::field::authorization];
    const auto key = bearer_key(std::string_view(h.data(), h.size()));
    const int idx = find_key(ctx_.opts.api_keys, key);
    if (idx < 0) return std::nullopt;
    if (ctx_.opts.api_keys.empty()) return std::make_pair(std::string(), std::string());
    return std::make_pair(ctx_.opts.tenant_of(idx), std::string(key));
  }

  void handle(http::request<http::string_body>&& req) {
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    const std::string path = path_of(req.target());
    const auto method = req.method();
    // In flight until its answer is written: taken before the draining check, so a drain that
    // sees none in flight knows every later request sees it draining.
    flight_ = ctx_.flight();
    // HEAD is GET without the body (RFC 9110): the same status and headers, Content-Length included.
    head_request_ = method == http::verb::head;
    const bool get = method == http::verb::get || head_request_;

    if (ctx_.draining && path != "/health" && path != "/metrics") {
      // Shutting down: running requests finish, new ones go elsewhere.
      endpoint_ = "other";
      keep_alive_ = false;
      retry_after_s_ = 1;
      api_error e = bad_status(503, "the server is shutting down; retry on another instance", "shutting_down");
      e.type = "server_error";
      return send_error(e);
    }
    if (method == http::verb::options) {
      // A CORS preflight: the Origin was checked with the header (a foreign one got 403).
      endpoint_ = "preflight";
      // Without an Origin it is no preflight: a 405 with the path's own methods (an unknown path
      // goes on to its 404).
      if (cors_origin_.empty() && allowed_methods(path))
        return method_not_allowed(path, " (OPTIONS is for CORS preflights)");
      if (!cors_origin_.empty()) return send(http::status::no_content, {}, nullptr);
    }
    if (path == "/v1/ws") {
      endpoint_ = "ws";
      if (!get) return method_not_allowed(path, " (a WebSocket upgrade)");
      if (!beast::websocket::is_upgrade(req))
        return send_error(bad_status(400, "/v1/ws needs a WebSocket upgrade", "not_websocket"));
      std::string owner, tenant;
      bool authed = true;
      if (!ctx_.opts.api_keys.empty()) {
        if (req[http::field::authorization].empty()) {
          authed = false;  // may send an `auth` frame
        } else if (auto a = authorise(req)) {
          tenant = a->first;
          owner = a->second;
        } else {
          return send_error(unauthorised());
        }
      }
      flight_.reset();  // the WebSocket session counts its own requests
      start_ws_session(ctx_, std::move(stream_), std::move(req), owner, tenant, authed, std::move(slot_));
      return;
    }
    if (path == "/health") {
      endpoint_ = "health";
      if (!get) return method_not_allowed(path);
      const bool draining = ctx_.draining;
      const bool loaded = ctx_.inf.ready();
      // Loaded but nothing can serve (a cluster front with no replica left): 503 too.
      const std::string unavailable = loaded && !draining ? ctx_.inf.unavailable() : std::string();
      const bool ok = loaded && !draining && unavailable.empty();
      const std::string state = ok ? "ok" : draining ? "draining" : !loaded ? "loading" : unavailable;
      const std::string details = ctx_.inf.health_details();
      std::string body = R"({"status":")" + state + "\"";
      if (!details.empty()) body += "," + details;
      return send(ok ? http::status::ok : http::status::service_unavailable, body + "}", "application/json");
    }
    if (path == "/metrics") {
      endpoint_ = "metrics";
      if (!get) return method_not_allowed(path);
      return send(http::status::ok, ctx_.met.render(ctx_.inf.pipeline_metrics()), "text/plain; version=0.0.4");
    }
    if (path == "/admin/reload" || path == "/admin/config") {
      const bool reload = path == "/admin/reload";
      endpoint_ = reload ? "admin_reload" : "admin_config";
      if (reload ? method != http::verb::post : !get)
        return method_not_allowed(path);
      if (ctx_.opts.admin_token.empty()) {
        api_error e = bad_status(403, "admin endpoints are off: set auth.admin_token in the config", "admin_disabled");
        e.type = "permission_error";
        return send_error(e);
      }
      const auto h = req[http::field::authorization];
      const auto key = bearer_key(std::string_view(h.data(), h.size()));
      if (key.empty() || find_key({ctx_.opts.admin_token}, key) < 0) {
        api_error e = bad_status(401, "the admin token is required: send 'Authorization: Bearer <admin token>'",
                                 "invalid_admin_token");
        e.type = "authentication_error";
        return send_error(e);
      }
      stream_.expires_never();
      std::weak_ptr<http_session> w = weak_from_this();
      ctx_.inf.admin(reload ? "reload" : "config", [w](inference::admin_reply r) {
        if (auto s = w.lock()) {
          auto ex = s->stream_.get_executor();
          asio::post(ex, [s = std::move(s), r = std::move(r)] {
            s->send(static_cast<http::status>(r.status), r.body, "application/json");
          });
        }
      });
      return watch_disconnect();
    }
    if (path == "/" || path == "/index.html") {
      endpoint_ = "page";
      if (!get) return method_not_allowed(path);
      return send(http::status::ok, std::string(chat_page_html()), "text/html; charset=utf-8");
    }
    if (path == "/v1/models") {
      endpoint_ = "models";
      if (!get) return method_not_allowed(path);
      if (!authorise(req)) return send_error(unauthorised());
      return send(http::status::ok, models_json(ctx_.inf.model_name(), ctx_.started_at), "application/json");
    }
    if (path.rfind("/v1/models/", 0) == 0) {
      // The openai client's models.retrieve(id); it percent-encodes the id (a '/' in it too).
      endpoint_ = "models";
      if (!get) return method_not_allowed(path);
      if (!authorise(req)) return send_error(unauthorised());
      const std::string id = percent_decoded(std::string_view(path).substr(std::strlen("/v1/models/")));
      if (id != ctx_.inf.model_name()) {
        api_error e = bad_status(404, "model '" + id + "' is not served here (this server serves '" +
                                          ctx_.inf.model_name() + "')",
                                 "unknown_model");
        e.param = "model";
        return send_error(e);
      }
      return send(http::status::ok, model_json(ctx_.inf.model_name(), ctx_.started_at), "application/json");
    }
    if (path == "/v1/chat/completions" || path == "/v1/completions") {
      chat_ = path == "/v1/chat/completions";
      endpoint_ = json_endpoint(path);
      if (method != http::verb::post) return method_not_allowed(path);
      auto who = authorise(req);
      if (!who) return send_error(unauthorised());
      auto parsed = parse_openai_request(req.body(), chat_);
      if (!parsed.request) return send_error(parsed.error);
      if (!ctx_.inf.ready()) {
        api_error e = from_pipeline_error({0, "loading", "the model is still loading; retry shortly", 0});
        retry_after_s_ = 5;
        return send_error(e);
      }
      return start_completion(std::move(*parsed.request), who->first);
    }
    if (path == "/tokenize" || path == "/detokenize" || path == "/v1/embeddings") {
      endpoint_ = json_endpoint(path);
      if (method != http::verb::post) return method_not_allowed(path);
      if (!authorise(req)) return send_error(unauthorised());
      if (path == "/tokenize") {
        auto p = parse_tokenize_request(req.body());
        if (!p.query) return send_error(p.error);
        return await_reply<tokenized>([&](auto done) { ctx_.inf.tokenize(std::move(*p.query), std::move(done)); },
                                      [](const tokenized& t) { return tokenize_json(t); });
      }
      if (path == "/detokenize") {
        auto p = parse_detokenize_request(req.body());
        if (!p.tokens) return send_error(p.error);
        return await_reply<std::string>(
            [&](auto done) { ctx_.inf.detokenize(std::move(*p.tokens), std::move(done)); },
            [](const std::string& text) { return detokenize_json(text); });
      }
      auto p = parse_embedding_request(req.body());
      if (!p.query) return send_error(p.error);
      const bool base64 = p.query->base64;
      return await_reply<embedding_result>([&](auto done) { ctx_.inf.embed(std::move(*p.query), std::move(done)); },
                                           [base64](const embedding_result& r) { return embeddings_json(r, base64); });
    }
    endpoint_ = "other";
    // The endpoints that exist, named so that a client that guessed (the Responses API, an older
    // path) learns what to use instead.
    const std::string what = path == "/v1/responses" || path.rfind("/v1/responses/", 0) == 0
                                 ? "the Responses API (/v1/responses) is not served here"
                                 : "no such endpoint: " + std::string(req.method_string()) + " " + path;
    api_error e = bad_status(404, what + "; the endpoints are POST /v1/chat/completions, POST /v1/completions, "
                                         "POST /v1/embeddings, GET /v1/models, GET /v1/models/{id}, POST /tokenize, "
                                         "POST /detokenize, GET /v1/ws (WebSocket), GET /health, GET /metrics",
                             "not_found");
    e.type = "invalid_request_error";
    send_error(e);
  }

  api_error unauthorised() {
    api_error e = bad_status(401, "a valid API key is required: send 'Authorization: Bearer <key>'", "invalid_api_key");
    e.type = "authentication_error";
    return e;
  }

  // A request the pipeline answers once, off the I/O threads (net::inference's tokenize,
  // detokenize, embed): `start` hands it a callback; the answer is written on this strand.
  template <class T, class Start, class Write>
  void await_reply(Start start, Write write) {
    stream_.expires_never();
    std::weak_ptr<http_session> w = weak_from_this();
    start([w, write](inference::reply<T> r) {
      auto s = w.lock();
      if (!s) return;
      auto ex = s->stream_.get_executor();
      asio::post(ex, [s = std::move(s), r = std::move(r), write] {
        if (s->closed_) return;
        if (r.error) {
          if (r.error->status == 503 || r.error->status == 429) s->retry_after_s_ = r.error->status == 503 ? 5 : 1;
          return s->send_error(*r.error);
        }
        s->send(http::status::ok, write(r.value), "application/json");
      });
    });
    watch_disconnect();  // notices a client that goes away, and keeps this session alive meanwhile
  }

  // `allowed`: "GET", "POST" or "GET or POST ..." (the message); Allow lists the same methods,
  // HEAD with GET, since every GET path answers HEAD too.
  // 405, the endpoint's methods in Allow (RFC 9110 15.5.6: "GET, HEAD" where GET is, HEAD being
  // GET without the body here) and `how` in the message.
  void method_not_allowed(const std::string& path, const char* why = "") {
    allow_ = allowed_methods(path);
    const std::string_view allow = allow_ ? allow_ : "";
    const std::string how(allow == "GET, HEAD" ? "GET" : allow);
    send_error(bad_status(405, "use " + how + " on " + path + why, "method_not_allowed"));
  }

  // ---- plain responses --------------------------------------------------------------------
  void send(http::status st, std::string body, const char* content_type) {
    ctx_.met.count_request(endpoint_, std::to_string(static_cast<int>(st)));
    if (st == http::status::no_content) {
      auto res = std::make_shared<http::response<http::empty_body>>(st, version_);
      set_headers(*res, content_type);
      return write(res);
    }
    if (head_request_) {
      auto res = std::make_shared<http::response<http::empty_body>>(st, version_);
      set_headers(*res, content_type);
      res->content_length(body.size());
      return write(res);
    }
    auto res = std::make_shared<http::response<http::string_body>>(st, version_);
    set_headers(*res, content_type);
    res->body() = std::move(body);
    res->prepare_payload();
    write(res);
  }

  template <class Response>
  void set_headers(Response& res, const char* content_type) {
    res.set(http::field::server, "troupe");
    if (content_type) res.set(http::field::content_type, content_type);
    if (retry_after_s_ > 0) res.set(http::field::retry_after, std::to_string(retry_after_s_));
    retry_after_s_ = 0;
    if (allow_) res.set(http::field::allow, allow_);
    allow_ = nullptr;
    // RFC 9110 11.6.1: a 401 names the scheme that would be accepted (an API key as a bearer token).
    if (res.result() == http::status::unauthorized) res.set(http::field::www_authenticate, "Bearer");
    if (!cors_origin_.empty()) {
      res.set(http::field::access_control_allow_origin, cors_origin_);
      res.set(http::field::vary, "Origin");
      res.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
      res.set(http::field::access_control_allow_headers, "Authorization, Content-Type");
      res.set(http::field::access_control_max_age, "600");
    }
    res.keep_alive(keep_alive_);
  }

  // The same headers, for the hand-written head of a server-sent-event stream.
  std::string cors_header_lines() const {
    if (cors_origin_.empty()) return {};
    return "Access-Control-Allow-Origin: " + cors_origin_ + "\r\nVary: Origin\r\n";
  }

  template <class Response>
  void write(const std::shared_ptr<Response>& res) {
    response_writing_ = true;
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      self->response_writing_ = false;
      self->flight_.reset();  // the answer is out (or the connection is gone)
      if (ec) return self->close();
      if (!res->keep_alive()) return self->close();
      self->reset_request_state();
      self->next_request();
    });
  }

  // Reads the next request once the watch read (if any) has stopped.
  void next_request() {
    if (watching_) {
      resume_after_watch_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    do_read();
  }

  void send_error(const api_error& e) {
    send(static_cast<http::status>(e.status), error_json(e), "application/json");
  }

  void reset_request_state() {
    request_ = {};
    hold_self_.reset();
    cors_origin_.clear();
    completion_ = {};
    recorders_.clear();
    queue_.clear();
    queued_bytes_ = 0;
    gate_.stop();
    finishing_ = false;
    head_counted_ = false;
    probe_timer_.cancel();
  }

  void close() {
    flight_.reset();
    if (closed_) return;
    closed_ = true;
    gate_.stop();
    if (request_ && !completion_.ended()) {
      // The client went away before its answer: counted as nginx does, 499 (a stream whose
      // head went out with an event was counted 200 then).
      if (!head_counted_) ctx_.met.count_request(endpoint_, "499");
      probe_timer_.cancel();
      request_.cancel();
    }
    hold_self_.reset();
    if (stream_.is_tls() && !peer_closed_ && !watching_ && !writing_ && !response_writing_) {
      // TLS: close_notify first, so that the client knows the answer was not cut short. It
      // waits (at most linger_time) for the client's close_notify, dropping what the client
      // still sends meanwhile; then the TCP half-close and linger below. With a read or write
      // under way (a client that went away) there is no TLS to close cleanly: straight to TCP.
      stream_.expires_after(linger_time);
      return stream_.tls().async_shutdown([self = shared_from_this()](beast::error_code) { self->close_tcp(); });
    }
    close_tcp();
  }

  void close_tcp() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec || peer_closed_) {
      stream_.socket().close(ec);
      return;
    }
    if (watching_) {
      stream_.socket().cancel(ec);  // the watch read's handler lingers
      return;
    }
    linger();
  }

  // Reads and drops what the client still sends (see linger_bytes), then closes. On the TCP
  // stream even under TLS: the bytes are dropped unread.
  void linger() {
    stream_.expires_after(linger_time);
    stream_.next_layer().async_read_some(asio::buffer(drain_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->lingered_ += n;
      beast::error_code ignored;
      if (ec || self->lingered_ >= linger_bytes) {
        self->stream_.socket().close(ignored);
        return;
      }
      self->linger();
    });
  }

  // ---- completions ------------------------------------------------------------------------
  // The completion's choices, chunks and answer are net/completion_assembly.hpp's; the session
  // submits the choices' requests and writes what each event's step says.
  void start_completion(openai_request req, const std::string& tenant) {
    if (auto e = completion_.begin(req, chat_, unix_now(), ctx_.inf)) return send_error(*e);
    req.spec.tenant = tenant;
    stream_.expires_never();
    ++generation_;
    recorders_.assign(completion_.size(), request_recorder(ctx_.met));
    spec_ = std::move(req.spec);
    submit_choice(0);
    watch_disconnect();  // also keeps this session alive while the request runs
  }

  // Choice i is its own request with seed + i (greedy ones are equal, as OpenAI's). Choice 0 goes
  // first, the others once its first token is out: by then its prompt's KV blocks are in the
  // prefix cache and the others share them instead of computing them again.
  void submit_choice(size_t i) {
    actors::request_spec spec = spec_;
    spec.sampling.seed = spec_.sampling.seed + i;
    std::weak_ptr<http_session> w = weak_from_this();
    const uint64_t gen = generation_;
    // Streaming: manual acks, a token counting as consumed once its chunks are written and the
    // client's unread bytes are under server.max_unread_kib (ack_when_written), so a client that
    // stops reading pauses its sequence at the streamer. Whole answers need no flow control.
    request_.handles.push_back(ctx_.inf.submit(
        std::move(spec),
        [w, gen, i](const actors::event& e) {
          if (auto s = w.lock()) {
            auto ex = s->stream_.get_executor();
            asio::post(ex, [s = std::move(s), gen, i, e] { s->on_event(gen, i, e); });
          }
        },
        completion_.streaming() ? actors::ack_mode::manual : actors::ack_mode::on_handoff));
  }

  // Choice i's token event just handled is acknowledged once what it queued (if anything) is
  // written, through the gate (net/detail/unread_gate.hpp).
  void ack_when_written(size_t i) {
    if (i >= request_.handles.size()) return;
    std::function<void()> ack = [h = request_.handles[i]] { h.ack(1); };
    if (queue_.empty()) return gate_.release(std::move(ack), shared_from_this());
    auto& last = queue_.back().written;
    if (!last) {
      last = std::move(ack);
      return;
    }
    last = [before = std::move(last), ack = std::move(ack)] {
      before();
      ack();
    };
  }

  void on_event(uint64_t gen, size_t i, const actors::event& e) {
    // A choice cancelled with its siblings may still answer after the completion ended (or after
    // the next request on this connection began): ignored.
    if (closed_ || gen != generation_ || !completion_.accepts(i)) return;
    recorders_[i].record(e, std::chrono::steady_clock::now());
    const bool token = std::holds_alternative<actors::token_event>(e);
    auto s = completion_.feed(i, e);
    if (s.submit_others)
      for (size_t k = 1; k < completion_.size(); ++k) submit_choice(k);
    if (s.cancel) request_.cancel();
    if (s.error) {
      if (s.retry_after_s > 0) retry_after_s_ = s.retry_after_s;
      return send_error(*s.error);
    }
    if (s.answer) return send(http::status::ok, std::move(*s.answer), "application/json");
    if (completion_.stream_open() && !head_counted_) count_head();  // opened early by probe_reader
    if (s.open_stream) send_sse_head();
    for (auto& ev : s.events) queue_chunk(std::move(ev));
    if (s.end_stream) return end_sse();
    if (token && completion_.streaming()) ack_when_written(i);
  }

  void send_sse_head(bool count = true) {
    if (count) count_head();
    // HTTP/1.0 has no chunked coding (RFC 9112 6.1: only for an HTTP/1.1 request): the events
    // go out as they are and the closed connection ends the body.
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    std::string h = std::string(chunked_ ? "HTTP/1.1" : "HTTP/1.0") +
                    " 200 OK\r\nServer: troupe\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
                    (chunked_ ? "Transfer-Encoding: chunked\r\n" : "") + cors_header_lines();
    h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    queue_raw(std::move(h));
  }

  // A stream counts as 200 once, when its head goes out with its first event.
  void count_head() {
    if (head_counted_) return;
    head_counted_ = true;
    ctx_.met.count_request(endpoint_, "200");
  }

  void end_sse() {
    queue_chunk(std::string(sse_done));
    if (chunked_) queue_raw("0\r\n\r\n");
    finishing_ = true;
    if (!writing_) after_stream();
  }

  void queue_chunk(std::string data) {
    if (!chunked_) return queue_raw(std::move(data));
    char hex[20];
    std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
    data.insert(0, hex);
    data += "\r\n";
    queue_raw(std::move(data));
  }

  void queue_raw(std::string data) {
    queued_bytes_ += data.size();
    queue_.push_back({std::move(data), {}});
    if (!writing_) write_next();
  }

  void write_next() {
    if (queue_.empty() || closed_) {
      writing_ = false;
      if (finishing_) after_stream();
      return;
    }
    writing_ = true;
    asio::async_write(stream_, asio::buffer(queue_.front().data),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->close();
                        self->queued_bytes_ -= self->queue_.front().data.size();
                        auto written = std::move(self->queue_.front().written);
                        self->queue_.pop_front();
                        self->gate_.release(std::move(written), self);
                        self->write_next();
                      });
  }

  // While a stream runs nobody reads the socket, so a client that goes away would only be noticed
  // at the next write. One pending read notices it at once (and cancels the request).
  void watch_disconnect() {
    watching_ = true;
    stream_.async_read_untimed(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (self->closed_) return self->linger();
      if (!ec) {
        self->buffer_.commit(n);  // a pipelined request: parsed once this one ends
        if (self->buffer_.size() > self->ctx_.opts.max_body_bytes) return self->close();
        if (self->resume_after_watch_) {
          self->resume_after_watch_ = false;
          return self->do_read();
        }
        if (!self->completion_.ended()) self->watch_disconnect();
        return;
      }
      if (ec == asio::error::operation_aborted && self->resume_after_watch_) {
        self->resume_after_watch_ = false;
        self->reset_request_state();
        return self->do_read();
      }
      if (ec == asio::error::eof && !self->closed_) {
        // Half-closed (shutdown(SHUT_WR), `nc -N`): the client sent all it will send and still
        // reads, as HTTP/1.1 allows. Its request goes on and is answered; only a reset or a
        // failed write means it is gone. Nothing else holds the session meanwhile.
        self->peer_closed_ = true;
        if (!self->completion_.ended() || self->writing_) self->hold_self_ = self;
        if (self->resume_after_watch_) {
          self->resume_after_watch_ = false;
          self->reset_request_state();
          return self->do_read();
        }
        if (self->completion_.streaming() && !self->completion_.ended()) self->probe_reader();
        return;
      }
      self->close();  // the client went away (reset): cancels the request
    });
  }

  // A client that closed its side during a streamed completion has either half-closed (it still
  // reads) or left: a chat page's stop button, or a client's timeout during a long prompt, where
  // nothing is written for many seconds. Only a write tells them apart: a client that left answers
  // it with a reset, and the write after that fails, which cancels the request (close()). So the
  // stream opens at once (its head and role chunks, as its first token would open it) and an SSE
  // comment, which clients skip, goes out every second until the completion ends. A whole
  // (non-streamed) answer cannot be probed without committing its status: it is still answered.
  void probe_reader() {
    if (closed_ || finishing_ || completion_.ended()) return;
    if (!completion_.stream_open()) {
      auto s = completion_.open_stream_now();
      if (s.open_stream) send_sse_head(/*count=*/false);  // counted when the answer comes (or 499)
      for (auto& ev : s.events) queue_chunk(std::move(ev));
    } else {
      queue_chunk(": waiting for the model\n\n");
    }
    probe_timer_.expires_after(std::chrono::seconds(1));
    probe_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->probe_reader();
    });
  }

  void after_stream() {
    if (closed_ || !finishing_ || writing_) return;
    finishing_ = false;
    flight_.reset();  // the stream's last chunk is written
    if (!keep_alive_) return close();
    reset_request_state();
    next_request();
  }

  server_context& ctx_;
  conn_stream stream_;          // plain TCP, or TLS (net/detail/conn_stream.hpp)
  std::string plain_answer_;    // the 400 to plain HTTP on the TLS port
  bool response_writing_ = false;  // an http::async_write is under way
  std::shared_ptr<void> slot_;  // this connection's place among the open ones (none: refused)
  std::string refusal_;         // why it is refused
  std::string cors_origin_;     // the request's allowed Origin (empty: none)
  bool peer_closed_ = false;    // the client half-closed (read EOF)
  bool head_counted_ = false;   // the stream's 200 is counted (count_head)
  bool reading_ = false;        // a request is being read (read_timer_ runs)
  bool header_done_ = false;    // its header is in
  bool read_timed_out_ = false; // read_timer_ cancelled the read
  asio::steady_timer read_timer_{stream_.get_executor()};  // the request's read deadline
  asio::steady_timer probe_timer_{stream_.get_executor()};  // probe_reader's next write
  std::shared_ptr<http_session> hold_self_;  // alive while a half-closed client's answer is due
  std::array<char, 4096> drain_{};
  size_t lingered_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  bool head_request_ = false;
  std::shared_ptr<void> flight_;  // ctx_.flight() while a request is handled
  unsigned version_ = 11;
  bool chunked_ = true;  // the stream's body in chunked coding (HTTP/1.1) or as is (HTTP/1.0)
  std::string endpoint_ = "other";
  int64_t retry_after_s_ = 0;
  const char* allow_ = nullptr;  // a 405's Allow header (RFC 9110 15.5.6): the methods the path takes
  bool closed_ = false;
  // The running completion.
  bool chat_ = true;
  completion_assembly completion_;
  std::vector<request_recorder> recorders_;  // the metrics of each choice's request
  // The requests of the running completion's choices: cancelled together.
  struct request_set {
    std::vector<actors::request_handle> handles;
    explicit operator bool() const { return !handles.empty(); }
    void cancel() const {
      for (const auto& h : handles) h.cancel();
    }
  };
  request_set request_;  // empty between requests
  actors::request_spec spec_;         // what each choice submits (its seed + index)
  uint64_t generation_ = 0;           // tells a finished completion's late events apart
  // SSE output.
  struct out_chunk {
    std::string data;
    std::function<void()> written;  // the acknowledgement of the token events that queued it
  };
  std::deque<out_chunk> queue_;
  size_t queued_bytes_ = 0;           // in queue_ (the gate counts them as unread)
  bool writing_ = false;
  bool finishing_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  unread_gate gate_;  // holds token acknowledgements while the client's unread bytes are over the bound
};

}  // namespace

void start_http_session(server_context& ctx, tcp::socket socket, asio::ssl::context* tls, std::shared_ptr<void> slot,
                        std::string refusal) {
  std::make_shared<http_session>(ctx, std::move(socket), tls, std::move(slot), std::move(refusal))->run();
}

}  // namespace troupe::net::detail

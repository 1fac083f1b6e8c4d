// The HTTP session of one connection (net/http_session.hpp): TLS, reading requests, routing
// (the OpenAI-compatible endpoints, /v1/embeddings, /tokenize and /detokenize, /health,
// /metrics, /v1/models, /admin, the chat page, the upgrade to WebSocket in ws_session.cpp), plain
// answers and closing. The completions' answers and streams: http_session_completion.cpp.
#include "net/http_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "net/auth.hpp"
#include "net/chat_page.hpp"
#include "net/http_routes.hpp"
#include "net/openai_codec.hpp"
#include "net/tokenize_codec.hpp"

namespace troupe::net::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// A request target's path (net/http_routes.hpp takes std::string_view; Beast's may be Boost's).
std::string path_of(beast::string_view target) { return strip_query(std::string_view(target.data(), target.size())); }

// After an answer that closes the connection, the unread rest of the request (a body over the
// limit, or one that was refused before it was read) is read and dropped, up to this many bytes
// and for at most request_reading::linger_time, before the socket closes: closing with unread
// bytes makes the kernel send a reset, which can destroy the answer before the client reads it
// (a client still sending its body would see a broken pipe instead of the 413).
constexpr size_t linger_bytes = 16 << 20;
constexpr std::chrono::seconds linger_time = request_reading::linger_time;

// The limits are codes of the same category as a malformed request: they are told apart first.
request_reading::read_error read_error_of(beast::error_code ec) {
  using re = request_reading::read_error;
  if (!ec) return re::none;
  if (ec == http::error::end_of_stream) return re::end_of_stream;
  if (ec == http::error::body_limit) return re::body_limit;
  if (ec == http::error::header_limit) return re::header_limit;
  if (ec.category() == http::make_error_code(http::error::bad_target).category()) return re::malformed;
  return re::other;
}

}  // namespace

api_error unauthorised() {
  api_error e = bad_status(401, "a valid API key is required: send 'Authorization: Bearer <key>'", "invalid_api_key");
  e.type = "authentication_error";
  return e;
}

http_session::http_session(server_context& ctx, tcp::socket&& s, asio::ssl::context* tls, std::shared_ptr<void> slot,
                           std::string refusal) :
    ctx_(ctx), stream_(std::move(s), tls), slot_(std::move(slot)), refusal_(std::move(refusal)),
    reading_(ctx.opts.http_read_timeout, ctx.opts.max_body_bytes, !refusal_.empty()),
    gate_(stream_.get_executor(), stream_.socket().native_handle(), ctx.opts.max_unread_kib * 1024,
          [this] { return queued_bytes_; }) {
  ctx_.met.connection_opened(false);
  if (!slot_) ctx_.refusing.fetch_add(1);
}

http_session::~http_session() {
  ctx_.met.connection_closed(false);
  if (!slot_) ctx_.refusing.fetch_sub(1);
  if (!answer_->ended()) request_.cancel();
}

void http_session::run() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    if (self->stream_.is_tls()) return self->handshake();
    self->do_read();
  });
}

void http_session::send_health() {
  const bool draining = ctx_.draining;
  const bool loaded = ctx_.inf.ready();
  // Loaded but nothing can serve (a cluster front with no replica left): 503 too.
  const std::string unavailable = loaded && !draining ? ctx_.inf.unavailable() : std::string();
  const bool ok = loaded && !draining && unavailable.empty();
  const std::string state = ok ? "ok" : draining ? "draining" : !loaded ? "loading" : unavailable;
  const std::string details = ctx_.inf.health_details();
  std::string body = R"({"status":")" + state + "\"";
  if (!details.empty()) body += "," + details;
  send(ok ? http::status::ok : http::status::service_unavailable, body + "}", "application/json");
}

void http_session::send_metrics() {
  send(http::status::ok, ctx_.met.render(ctx_.inf.pipeline_metrics()), "text/plain; version=0.0.4");
}

// ---- TLS (server.tls_cert) ---------------------------------------------------------------
// The handshake has the time a request has to arrive (a stalled one is a slow-loris too).
void http_session::handshake() {
  stream_.expires_after(reading_.read_time());
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

void http_session::refuse_plain_http() {
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

// ---- reading and routing ----------------------------------------------------------------
std::string_view http_session::buffered() const {
  const auto held = buffer_.data();
  return {static_cast<const char*>(held.data()), held.size()};
}

void http_session::do_read() {
  auto start = reading_.begin(buffered());
  buffer_.consume(start.skip);
  if (start.what == request_reading::start_action::close) return close();
  endpoint_ = "other";  // until the header names one (on_header)
  // An earlier HEAD on this connection does not make this request's answer bodiless (on_header
  // and handle() say whether this one is a HEAD).
  head_request_ = false;
  if (start.what == request_reading::start_action::answer) {
    keep_alive_ = false;
    return send_error(*start.error);
  }
  parser_.emplace();
  parser_->body_limit(ctx_.opts.max_body_bytes);
  parser_->header_limit(request_reading::header_limit_bytes);
  // Stalled senders and idle keep-alives go; a refused connection gets a few seconds at most.
  // A request begun and not finished in time is answered 408 (read_timer_); the stream's own
  // timeout, a little later, is the backstop that closes the socket whatever happens.
  stream_.expires_after(reading_.read_time() + request_reading::backstop);
  read_timer_.expires_after(reading_.read_time());
  read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || !self->reading_.deadline_passed()) return;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);  // the read's handler answers (on_read)
  });
  // The header first: what it says decides whether the body is read at all.
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void http_session::on_header(beast::error_code ec) {
  // RFC 9112 2.2: empty lines before a request line are ignored. do_read drops those that came
  // with what was read before; one that arrived on its own reached the parser as this request's
  // start (a bad method, once the header after it is in): dropped now, and the request read again.
  if (ec == http::error::bad_method && request_reading::starts_with_empty_line(buffered())) {
    stop_read_timer();
    return do_read();
  }
  // A refusal counts under the endpoint the request was sent to once its request line is read
  // (413 on Content-Length, 431, a malformed field, a refused Transfer-Encoding or Host).
  if (!parser_->get().target().empty()) endpoint_ = endpoint_of(path_of(parser_->get().target()));
  if (ec) return on_read(ec);
  reading_.header_read();
  const auto& h = parser_->get();
  head_request_ = h.method() == http::verb::head;  // refusals from here on are bodiless for a HEAD
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
  const auto expect = h[http::field::expect];
  const auto next = request_reading::body(parser_->is_done(), version_, std::string_view(expect.data(), expect.size()),
                                          [&] { return refused_on_header(h); });
  auto read_body = [self = shared_from_this()] {
    http::async_read(self->stream_, self->buffer_, *self->parser_,
                     [self](beast::error_code ec, size_t) { self->on_read(ec); });
  };
  switch (next) {
    case request_reading::body_action::none:
      return on_read({});
    case request_reading::body_action::final_status: {
      stop_read_timer();
      auto req = parser_->release();
      req.keep_alive(false);
      return handle(std::move(req));
    }
    case request_reading::body_action::send_continue: {
      static constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(stream_, asio::buffer(k_continue.data(), k_continue.size()),
                               [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
                                 if (ec) return self->close();
                                 read_body();
                               });
    }
    case request_reading::body_action::read:
      return read_body();
  }
}

// Whether handle() will refuse the request whatever its body: an unknown path, a method the
// path does not take, or a JSON endpoint without a valid API key.
bool http_session::refused_on_header(const request_header& h) {
  const std::string path = path_of(h.target());
  const char* allowed = allowed_methods(path);
  if (!allowed) return true;
  if (std::string_view(allowed) == "POST" && h.method() != http::verb::post) return true;
  return json_endpoint(path) && !authorise(h);
}

// Framing, the Host and the Origin, before the body is read (net/request_guard.hpp).
std::optional<api_error> http_session::check_header(const request_header& h) {
  for (const auto& [field, name] : {std::pair{http::field::host, "Host"}, {http::field::origin, "Origin"},
                                    {http::field::content_type, "Content-Type"},
                                    {http::field::authorization, "Authorization"}})
    if (auto e = request_guard::check_once(name, h.count(field))) return e;
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
    if (auto e = request_guard::check_body_framed(h.find(http::field::content_length) != h.end(),
                                                  h.find(http::field::transfer_encoding) != h.end())) {
      endpoint_ = json_endpoint(path);
      return e;
    }
  }
  return std::nullopt;
}

// A connection over max_connections (or the per-client limit): 503, or for a WebSocket upgrade
// a close frame (1013, try again later), then closed.
void http_session::refuse(const request_header& h) {
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
void http_session::stop_read_timer() {
  reading_.stop();
  read_timer_.cancel();
}

void http_session::on_read(beast::error_code ec) {
  stop_read_timer();
  const auto error = read_error_of(ec);
  const std::string why = error == request_reading::read_error::malformed ? ec.message() : std::string();
  auto step = reading_.finish(error, why, buffer_.size(), parser_->got_some());
  switch (step.what) {
    case request_reading::finish_action::handle:
      return handle(parser_->release());
    case request_reading::finish_action::close:
      return close();
    case request_reading::finish_action::answer:
      keep_alive_ = false;
      if (step.endpoint_other) endpoint_ = "other";
      return send_error(*step.error);
  }
}

// The tenant and owner of an authorised request; nullopt when keys are configured and the
// request has none or a wrong one.
std::optional<std::pair<std::string, std::string>> http_session::authorise(const request& req) {
  const auto h = req[http::field::authorization];
  const auto key = bearer_key(std::string_view(h.data(), h.size()));
  const int idx = find_key(ctx_.opts.api_keys, key);
  if (idx < 0) return std::nullopt;
  if (ctx_.opts.api_keys.empty()) return std::make_pair(std::string(), std::string());
  return std::make_pair(ctx_.opts.tenant_of(idx), std::string(key));
}

void http_session::handle(request&& req) {
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
  if (method == http::verb::post && json_endpoint(path)) {
    // Every parameter of these goes in the JSON body; one in the query would be ignored.
    const std::string_view target(req.target().data(), req.target().size());
    const auto q = target.find('?');
    const auto params = q == std::string_view::npos ? decltype(query_params({})){} : query_params(target.substr(q + 1));
    if (!params.empty()) {
      endpoint_ = json_endpoint(path);
      return send_error(bad_request("query parameter '" + params.front().first + "' is not read on POST " + path +
                                        ": the request's parameters go in its JSON body",
                                    params.front().first, "unsupported_field"));
    }
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
  if (path == "/health" || path == "/metrics") {
    endpoint_ = path.substr(1);
    if (!get) return method_not_allowed(path);
    // Figures gathered after the request came (inference::fresh_figures), without holding the
    // I/O thread while they are. The callback keeps the session: nothing else is pending on it
    // meanwhile (it is always called, within fresh_figures' bound).
    ctx_.inf.fresh_figures([self = shared_from_this(), health = path == "/health"]() mutable {
      auto ex = self->stream_.get_executor();
      asio::post(ex, [self = std::move(self), health] { health ? self->send_health() : self->send_metrics(); });
    });
    return;
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
    // Both read the server's own config file: nothing in the request is an input.
    const std::string_view target(req.target().data(), req.target().size());
    if (const auto q = target.find('?'); q != std::string_view::npos)
      if (const auto params = query_params(target.substr(q + 1)); !params.empty())
        return send_error(bad_request("query parameter '" + params.front().first + "' is not read: " + path +
                                          " works on the config file the server started with",
                                      params.front().first, "unsupported_field"));
    if (!req.body().empty())
      return send_error(bad_request(path + " takes no body: it works on the config file the server started with (edit "
                                           "that file, then reload)",
                                    "body", "unsupported_field"));
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
    return send(http::status::ok, models_json(ctx_.inf.listed_models(), ctx_.started_at), "application/json");
  }
  if (path.rfind("/v1/models/", 0) == 0) {
    // The openai client's models.retrieve(id); it percent-encodes the id (a '/' in it too).
    endpoint_ = "models";
    if (!get) return method_not_allowed(path);
    if (!authorise(req)) return send_error(unauthorised());
    const std::string id = percent_decoded(std::string_view(path).substr(std::strlen("/v1/models/")));
    const auto listed = ctx_.inf.listed_models();
    if (std::find(listed.begin(), listed.end(), id) == listed.end()) {
      std::string names;
      for (const auto& n : listed) names += (names.empty() ? "'" : ", '") + n + "'";
      api_error e = bad_status(404, "model '" + id + "' is not served here (this server serves " + names + ")",
                               "unknown_model");
      e.param = "model";
      return send_error(e);
    }
    return send(http::status::ok, model_json(id, ctx_.started_at), "application/json");
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
    p.query->abandoned = [w = weak_from_this()] { return w.expired(); };
    return await_reply<embedding_result>([&](auto done) { ctx_.inf.embed(std::move(*p.query), std::move(done)); },
                                         [base64](const embedding_result& r) { return embeddings_json(r, base64); });
  }
  if (path == "/v1/responses" || path.rfind("/v1/responses/", 0) == 0) return handle_responses(req, path);
  endpoint_ = "other";
  // The endpoints that exist, named so that a client that guessed (an older path) learns what to
  // use instead.
  const std::string what = "no such endpoint: " + std::string(req.method_string()) + " " + path;
  api_error e = bad_status(404, what + "; the endpoints are POST /v1/chat/completions, POST /v1/completions, "
                                       "POST /v1/responses, GET|DELETE /v1/responses/{id}, "
                                       "POST /v1/embeddings, GET /v1/models, GET /v1/models/{id}, POST /tokenize, "
                                       "POST /detokenize, GET /v1/ws (WebSocket), GET /health, GET /metrics",
                           "not_found");
  e.type = "invalid_request_error";
  send_error(e);
}

// A request the pipeline answers once, off the I/O threads (net::inference's tokenize,
// detokenize, embed): `start` hands it a callback; the answer is written on this strand.
template <class T, class Start, class Write>
void http_session::await_reply(Start start, Write write) {
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
void http_session::method_not_allowed(const std::string& path, const char* why) {
  allow_ = allowed_methods(path);
  const std::string_view allow = allow_ ? allow_ : "";
  const std::string how(allow == "GET, HEAD" ? "GET" : allow);
  send_error(bad_status(405, "use " + how + " on " + path + why, "method_not_allowed"));
}

// ---- plain responses, closing and the watch read -------------------------------------
void http_session::send(http::status st, std::string body, const char* content_type) {
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
void http_session::set_headers(Response& res, const char* content_type) {
  res.set(http::field::server, "troupe");
  if (content_type) res.set(http::field::content_type, content_type);
  if (retry_after_s_ > 0) res.set(http::field::retry_after, std::to_string(retry_after_s_));
  retry_after_s_ = 0;
  if (std::exchange(should_retry_false_, false)) res.set("x-should-retry", "false");
  if (allow_) res.set(http::field::allow, allow_);
  allow_ = nullptr;
  // RFC 9110 11.6.1: a 401 names the scheme that would be accepted (an API key as a bearer token).
  if (res.result() == http::status::unauthorized) res.set(http::field::www_authenticate, "Bearer");
  if (!cors_origin_.empty()) {
    res.set(http::field::access_control_allow_origin, cors_origin_);
    res.set(http::field::vary, "Origin");
    res.set(http::field::access_control_allow_methods, "GET, POST, DELETE, OPTIONS");
    res.set(http::field::access_control_allow_headers, "Authorization, Content-Type");
    res.set(http::field::access_control_max_age, "600");
  }
  res.keep_alive(keep_alive_);
}

template <class Response>
void http_session::write(const std::shared_ptr<Response>& res) {
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
void http_session::next_request() {
  if (reading_.next_request_waits()) {
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  do_read();
}

void http_session::send_error(const api_error& e) {
  should_retry_false_ = e.no_retry;
  send(static_cast<http::status>(e.status), error_json(e), "application/json");
}

void http_session::reset_request_state() {
  request_ = {};
  hold_self_.reset();
  cors_origin_.clear();
  completion_ = {};
  responses_ = {};
  answer_ = &completion_;
  owner_.clear();
  recorders_.clear();
  queue_.clear();
  queued_bytes_ = 0;
  gate_.stop();
  finishing_ = false;
  head_counted_ = false;
  whole_head_out_ = false;
  probe_timer_.cancel();
}

void http_session::close() {
  flight_.reset();
  if (closed_) return;
  closed_ = true;
  gate_.stop();
  if (request_ && !answer_->ended()) {
    // The client went away before its answer: counted as nginx does, 499 (a stream whose
    // head went out with an event was counted 200 then).
    if (!head_counted_) ctx_.met.count_request(endpoint_, "499");
    probe_timer_.cancel();
    request_.cancel();
  }
  hold_self_.reset();
  if (stream_.is_tls() && !reading_.peer_closed() && !reading_.watching() && !writing_ && !response_writing_) {
    // TLS: close_notify first, so that the client knows the answer was not cut short. It
    // waits (at most linger_time) for the client's close_notify, dropping what the client
    // still sends meanwhile; then the TCP half-close and linger below. With a read or write
    // under way (a client that went away) there is no TLS to close cleanly: straight to TCP.
    stream_.expires_after(linger_time);
    return stream_.tls().async_shutdown([self = shared_from_this()](beast::error_code) { self->close_tcp(); });
  }
  close_tcp();
}

void http_session::close_tcp() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec || reading_.peer_closed()) {
    stream_.socket().close(ec);
    return;
  }
  if (reading_.watching()) {
    stream_.socket().cancel(ec);  // the watch read's handler lingers
    return;
  }
  linger();
}

// Reads and drops what the client still sends (see linger_bytes), then closes. On the TCP
// stream even under TLS: the bytes are dropped unread.
void http_session::linger() {
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

// While a request runs nobody reads the socket, so a client that goes away would only be noticed
// at the next write. One pending read notices it at once (and cancels the request).
void http_session::watch_disconnect() {
  reading_.watch_started();
  stream_.async_read_untimed(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    using result = request_reading::watch_result;
    if (!ec && !self->closed_) self->buffer_.commit(n);  // a pipelined request: parsed once this one ends
    const result r = !ec                                 ? result::data
                     : ec == asio::error::operation_aborted ? result::aborted
                     : ec == asio::error::eof               ? result::eof
                                                            : result::failed;
    auto step = self->reading_.watch_ended(r, {self->closed_, self->buffer_.size(), self->answer_->ended(),
                                               static_cast<bool>(self->request_), self->writing_});
    if (step.hold) self->hold_self_ = self;
    switch (step.what) {
      case request_reading::watch_action::linger: return self->linger();
      case request_reading::watch_action::close: return self->close();
      case request_reading::watch_action::read_next: return self->do_read();
      case request_reading::watch_action::reset_and_read:
        self->reset_request_state();
        return self->do_read();
      case request_reading::watch_action::watch_again: return self->watch_disconnect();
      case request_reading::watch_action::probe: return self->probe_reader();
      case request_reading::watch_action::idle: return;
    }
  });
}

void start_http_session(server_context& ctx, tcp::socket socket, asio::ssl::context* tls, std::shared_ptr<void> slot,
                        std::string refusal) {
  std::make_shared<http_session>(ctx, std::move(socket), tls, std::move(slot), std::move(refusal))->run();
}

}  // namespace troupe::net::detail

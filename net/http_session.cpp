// The HTTP session of one connection (the listener, server.cpp, hands it over): routing, the
// OpenAI-compatible endpoints (plain JSON and server-sent events), /v1/embeddings, /tokenize
// and /detokenize, /health, /metrics, /v1/models, /admin, the chat page, and the upgrade to
// WebSocket (ws_session.cpp). Each
// connection runs on its own strand; pipeline events arrive on actor threads and are posted
// onto it, so a session's state is only touched on its strand.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <optional>

#include "net/auth.hpp"
#include "net/chat_page.hpp"
#include "net/detail/server_context.hpp"
#include "net/openai_codec.hpp"
#include "net/tokenize_codec.hpp"

namespace troupe::net::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::atomic<uint64_t> next_completion_id{1};

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string strip_query(beast::string_view target) {
  auto q = target.find('?');
  return std::string(q == beast::string_view::npos ? target : target.substr(0, q));
}

class http_session : public std::enable_shared_from_this<http_session> {
 public:
  http_session(server_context& ctx, tcp::socket&& s) : ctx_(ctx), stream_(std::move(s)) {
    ctx_.met.connection_opened(false);
  }
  ~http_session() {
    ctx_.met.connection_closed(false);
    if (!ended_) request_.cancel();
  }

  void run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

 private:
  // ---- reading and routing ----------------------------------------------------------------
  void do_read() {
    parser_.emplace();
    parser_->body_limit(ctx_.opts.max_body_bytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(ctx_.opts.http_read_timeout);  // stalled senders and idle keep-alives go
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream) return close();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      endpoint_ = "other";
      return send_error(bad_status(413, "the body is larger than " + std::to_string(ctx_.opts.max_body_bytes) +
                                            " bytes", "body_too_large"));
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      endpoint_ = "other";
      return send_error(bad_status(431, "the request headers are larger than 16384 bytes", "headers_too_large"));
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category()) {
      keep_alive_ = false;
      endpoint_ = "other";
      return send_error(bad_status(400, "malformed HTTP request: " + ec.message(), "bad_http"));
    }
    if (ec) return close();
    handle(parser_->release());
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
    const std::string path = strip_query(req.target());
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
    if (path == "/v1/ws") {
      endpoint_ = "ws";
      if (!get) return method_not_allowed("GET (a WebSocket upgrade)");
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
      start_ws_session(ctx_, std::move(stream_), std::move(req), owner, tenant, authed);
      return;
    }
    if (path == "/health") {
      endpoint_ = "health";
      if (!get) return method_not_allowed("GET");
      const bool draining = ctx_.draining;
      const bool ok = ctx_.inf.ready() && !draining;
      const std::string details = ctx_.inf.health_details();
      std::string body = ok ? R"({"status":"ok")" : draining ? R"({"status":"draining")" : R"({"status":"loading")";
      if (!details.empty()) body += "," + details;
      return send(ok ? http::status::ok : http::status::service_unavailable, body + "}", "application/json");
    }
    if (path == "/metrics") {
      endpoint_ = "metrics";
      if (!get) return method_not_allowed("GET");
      return send(http::status::ok, ctx_.met.render(ctx_.inf.pipeline_metrics()), "text/plain; version=0.0.4");
    }
    if (path == "/admin/reload" || path == "/admin/config") {
      const bool reload = path == "/admin/reload";
      endpoint_ = reload ? "admin_reload" : "admin_config";
      if (reload ? method != http::verb::post : !get) return method_not_allowed(reload ? "POST" : "GET");
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
      if (!get) return method_not_allowed("GET");
      return send(http::status::ok, std::string(chat_page_html()), "text/html; charset=utf-8");
    }
    if (path == "/v1/models") {
      endpoint_ = "models";
      if (!get) return method_not_allowed("GET");
      if (!authorise(req)) return send_error(unauthorised());
      return send(http::status::ok, models_json(ctx_.inf.model_name(), unix_now()), "application/json");
    }
    if (path == "/v1/chat/completions" || path == "/v1/completions") {
      chat_ = path == "/v1/chat/completions";
      endpoint_ = chat_ ? "chat_completions" : "completions";
      if (method != http::verb::post) return method_not_allowed("POST");
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
      endpoint_ = path == "/tokenize" ? "tokenize" : path == "/detokenize" ? "detokenize" : "embeddings";
      if (method != http::verb::post) return method_not_allowed("POST");
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
    api_error e = bad_status(404, "no such endpoint: " + std::string(req.method_string()) + " " + path, "not_found");
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

  void method_not_allowed(const char* allowed) {
    api_error e = bad_status(405, std::string("use ") + allowed + " here", "method_not_allowed");
    send_error(e);
  }

  // ---- plain responses --------------------------------------------------------------------
  void send(http::status st, std::string body, const char* content_type) {
    ctx_.met.count_request(endpoint_, std::to_string(static_cast<int>(st)));
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
    res.set(http::field::content_type, content_type);
    if (retry_after_s_ > 0) res.set(http::field::retry_after, std::to_string(retry_after_s_));
    retry_after_s_ = 0;
    res.keep_alive(keep_alive_);
  }

  template <class Response>
  void write(const std::shared_ptr<Response>& res) {
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
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
    ended_ = false;
    streaming_ = false;
    head_sent_ = false;
    text_.clear();
    queue_.clear();
    finishing_ = false;
  }

  void close() {
    flight_.reset();
    if (closed_) return;
    closed_ = true;
    if (request_ && !ended_) {
      // The client went away before its answer: counted as nginx does, 499 (a stream whose
      // head went out was counted 200 then).
      if (!head_sent_) ctx_.met.count_request(endpoint_, "499");
      request_.cancel();
    }
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  // ---- completions ------------------------------------------------------------------------
  void start_completion(openai_request req, const std::string& tenant) {
    streaming_ = req.stream;
    include_usage_ = req.include_usage;
    head_ = completion_result{};
    head_.id = (chat_ ? "chatcmpl-" : "cmpl-") + std::to_string(next_completion_id.fetch_add(1));
    head_.created = unix_now();
    head_.model = req.model.empty() ? ctx_.inf.model_name() : req.model;
    req.spec.tenant = tenant;
    stream_.expires_never();
    recorder_ = request_recorder(ctx_.met);
    std::weak_ptr<http_session> w = weak_from_this();
    request_ = ctx_.inf.submit(std::move(req.spec), [w](const actors::event& e) {
      if (auto s = w.lock()) {
        auto ex = s->stream_.get_executor();
        asio::post(ex, [s = std::move(s), e] { s->on_event(e); });
      }
    });
    watch_disconnect();  // also keeps this session alive while the request runs
  }

  void on_event(const actors::event& e) {
    if (closed_ || ended_) return;
    recorder_.record(e, std::chrono::steady_clock::now());
    if (auto* t = std::get_if<actors::token_event>(&e)) {
      if (!streaming_) {
        text_ += t->text;
        return;
      }
      if (t->text.empty()) return;
      ensure_sse_head();
      chunk_spec c;
      c.text = t->text;
      queue_chunk(sse_event(chat_ ? chat_chunk_json(head_, c) : text_chunk_json(head_, c)));
      return;
    }
    ended_ = true;
    if (auto* d = std::get_if<actors::done_event>(&e)) {
      if (!streaming_) {
        completion_result r = head_;
        r.text = text_ + d->text;
        r.finish_reason = d->finish_reason;
        r.usage = d->usage;
        return send(http::status::ok, chat_ ? chat_completion_json(r) : text_completion_json(r), "application/json");
      }
      ensure_sse_head();
      chunk_spec c;
      c.text = d->text;
      c.finish_reason = d->finish_reason;
      if (!d->text.empty()) {
        chunk_spec t;
        t.text = d->text;
        queue_chunk(sse_event(chat_ ? chat_chunk_json(head_, t) : text_chunk_json(head_, t)));
      }
      c.text = {};
      queue_chunk(sse_event(chat_ ? chat_chunk_json(head_, c) : text_chunk_json(head_, c)));
      if (include_usage_) {
        chunk_spec u;
        u.usage = &d->usage;
        u.no_choices = true;
        queue_chunk(sse_event(chat_ ? chat_chunk_json(head_, u) : text_chunk_json(head_, u)));
      }
      return end_sse();
    }
    const auto& err = std::get<actors::error_event>(e);
    api_error ae = from_pipeline_error(err);
    if (!head_sent_) {
      if (ae.status == 429 || ae.status == 503)
        retry_after_s_ = std::max<int64_t>(1, (err.retry_after_ms + 999) / 1000);
      return send_error(ae);
    }
    queue_chunk(sse_event(error_json(ae)));
    end_sse();
  }

  void ensure_sse_head() {
    if (head_sent_) return;
    head_sent_ = true;
    ctx_.met.count_request(endpoint_, "200");
    std::string h = "HTTP/1.1 200 OK\r\nServer: troupe\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                    "Transfer-Encoding: chunked\r\n";
    h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    queue_raw(std::move(h));
    if (chat_) {
      chunk_spec c;
      c.role_only = true;
      queue_chunk(sse_event(chat_chunk_json(head_, c)));
    }
  }

  void end_sse() {
    queue_chunk(std::string(sse_done));
    queue_raw("0\r\n\r\n");
    finishing_ = true;
    if (!writing_) after_stream();
  }

  void queue_chunk(std::string data) {
    char hex[20];
    std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
    data.insert(0, hex);
    data += "\r\n";
    queue_raw(std::move(data));
  }

  void queue_raw(std::string data) {
    queue_.push_back(std::move(data));
    if (!writing_) write_next();
  }

  void write_next() {
    if (queue_.empty() || closed_) {
      writing_ = false;
      if (finishing_) after_stream();
      return;
    }
    writing_ = true;
    asio::async_write(stream_, asio::buffer(queue_.front()),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->close();
                        self->queue_.pop_front();
                        self->write_next();
                      });
  }

  // While a stream runs nobody reads the socket, so a client that goes away would only be noticed
  // at the next write. One pending read notices it at once (and cancels the request).
  void watch_disconnect() {
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (!ec) {
        self->buffer_.commit(n);  // a pipelined request: parsed once this one ends
        if (self->buffer_.size() > self->ctx_.opts.max_body_bytes) return self->close();
        if (self->resume_after_watch_) {
          self->resume_after_watch_ = false;
          return self->do_read();
        }
        if (!self->ended_) self->watch_disconnect();
        return;
      }
      if (ec == asio::error::operation_aborted && self->resume_after_watch_) {
        self->resume_after_watch_ = false;
        self->reset_request_state();
        return self->do_read();
      }
      self->close();  // the client went away: cancels the request
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
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  bool head_request_ = false;
  std::shared_ptr<void> flight_;  // ctx_.flight() while a request is handled
  unsigned version_ = 11;
  std::string endpoint_ = "other";
  int64_t retry_after_s_ = 0;
  bool closed_ = false;
  // The running completion.
  bool chat_ = true;
  bool streaming_ = false;
  bool include_usage_ = false;
  actors::request_handle request_;  // empty between requests
  bool ended_ = false;
  completion_result head_;
  std::string text_;
  request_recorder recorder_{ctx_.met};
  // SSE output.
  bool head_sent_ = false;
  std::deque<std::string> queue_;
  bool writing_ = false;
  bool finishing_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
};

}  // namespace

void start_http_session(server_context& ctx, tcp::socket socket) {
  std::make_shared<http_session>(ctx, std::move(socket))->run();
}

}  // namespace troupe::net::detail

// The WebSocket session of /v1/ws (docs/protocol.md): many requests multiplexed on one socket,
// frames written through one queue per socket on the session's strand, keep-alive pings by
// Beast's idle timeout, and streams recorded in the resume store so that a client can reconnect
// and `resume` without losing or duplicating tokens.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <deque>
#include <map>
#include <memory>

#include "net/auth.hpp"
#include "net/detail/server_context.hpp"
#include "net/ws_protocol.hpp"

namespace troupe::net::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

namespace {

class ws_session : public std::enable_shared_from_this<ws_session> {
 public:
  ws_session(server_context& ctx, beast::tcp_stream&& s, std::string owner, std::string tenant, bool authed) :
      ctx_(ctx), ws_(std::move(s)), owner_(std::move(owner)), tenant_(std::move(tenant)), authed_(authed) {
    ctx_.met.connection_opened(true);
  }
  ~ws_session() { ctx_.met.connection_closed(true); }

  void run(http::request<http::string_body> req) {
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    t.idle_timeout = ctx_.opts.ws_idle_timeout;
    t.keep_alive_pings = true;
    ws_.set_option(t);
    ws_.read_message_max(ctx_.opts.max_ws_message_bytes);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "troupe"); }));
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->do_read();
    });
  }

 private:
  void do_read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) return on_closed();  // closed, timed out, or a message over the limit (close 1009)
    if (!ws_.got_text()) {
      send(error_frame({}, "invalid_request", "frames must be text (JSON)"));
    } else {
      const auto data = buffer_.data();
      std::string text(static_cast<const char*>(data.data()), data.size());
      handle(text);
    }
    buffer_.consume(buffer_.size());
    do_read();
  }

  void handle(const std::string& text) {
    auto p = parse_client_frame(text);
    if (!p.frame) return send(error_frame(p.id, p.error.code, p.error.message));
    auto& f = *p.frame;
    if (f.type == frame_type::ping) return send(pong_frame());
    if (f.type == frame_type::auth) {
      const int idx = find_key(ctx_.opts.api_keys, f.key);
      if (idx < 0) return send(error_frame(f.id, "unauthorized", "the API key is not valid"));
      authed_ = true;
      if (!ctx_.opts.api_keys.empty()) {
        owner_ = f.key;
        tenant_ = ctx_.opts.tenant_of(idx);
      }
      return send(R"({"type":"authed"})");  // so that the client knows it may go on
    }
    if (!authed_)
      return send(error_frame(f.id, "unauthorized",
                              "send {\"type\":\"auth\",\"key\":...} or an Authorization header first"));
    switch (f.type) {
      case frame_type::generate: return generate(f);
      case frame_type::cancel: return cancel(f);
      case frame_type::resume: return resume(f);
      default: return;
    }
  }

  frame_sink make_sink() {
    std::weak_ptr<ws_session> w = weak_from_this();
    return [w](std::string frame, std::function<void()> written) {
      if (auto s = w.lock()) {
        auto ex = s->ws_.get_executor();
        asio::post(ex, [s = std::move(s), frame = std::move(frame), written = std::move(written)]() mutable {
          s->send(std::move(frame), std::move(written));
        });
      }
    };
  }

  void generate(client_frame& f) {
    // In flight until its final frame is written (or dropped with the socket), taken before the
    // draining check (see http_session::handle).
    auto hold = std::make_shared<std::shared_ptr<void>>(ctx_.flight());
    if (!ctx_.inf.ready()) return send(error_frame(f.id, "loading", "the model is still loading; retry shortly"));
    if (ctx_.draining)
      return send(error_frame(f.id, "shutting_down", "the server is shutting down; retry on another instance"));
    auto rec = ctx_.resumes.create(owner_, f.id, f.resume_key);
    if (!rec)
      return send(error_frame(f.id, "duplicate_id",
                              "the id '" + f.id + "' is in use (a running stream, or one still resumable)"));
    rec->attach(make_sink(), -1, this);
    // Ended streams leave the socket's list (their records stay in the store for the window).
    for (auto it = streams_.begin(); it != streams_.end();) it = it->second->ended() ? streams_.erase(it) : std::next(it);
    streams_[f.id] = rec;
    f.spec.tenant = tenant_;
    auto& met = ctx_.met;
    const auto window = ctx_.opts.resume_window;
    const std::string id = f.id;
    // Runs on pipeline threads, one event at a time: records into the stream (which forwards to
    // whoever is attached).
    auto on_event = [rec, id, &met, recorder = request_recorder(met), window,
                     hold](const actors::event& e) mutable {
      const auto now = std::chrono::steady_clock::now();
      recorder.record(e, now);
      if (auto* t = std::get_if<actors::token_event>(&e)) {
        rec->add_token(t->index, token_frame(id, t->index, t->text));
      } else if (auto* d = std::get_if<actors::done_event>(&e)) {
        met.count_request("ws", d->finish_reason);
        rec->finish(done_frame(id, *d), now, window, std::move(*hold));
      } else {
        const auto& er = std::get<actors::error_event>(e);
        met.count_request("ws", er.code);
        rec->finish(error_frame(id, er.code, er.message), now, window, std::move(*hold));
      }
    };
    // Manual acks: a token counts as consumed once its frame is written (stream_record), so a
    // reader that falls behind pauses its streams at the streamer.
    const auto request = ctx_.inf.submit(std::move(f.spec), std::move(on_event), actors::ack_mode::manual);
    // Every cancel of this stream (a cancel frame, a closed socket, a slow reader, an expired
    // window) goes through the record to the request's handle.
    rec->set_cancel([request] { request.cancel(); });
    rec->set_ack([request](int32_t n) { request.ack(n); });
  }

  // Only a stream this socket started or resumed (and still holds) can be cancelled from it.
  void cancel(const client_frame& f) {
    auto it = streams_.find(f.id);
    if (it == streams_.end() || !it->second->attached_to(this))
      return send(error_frame(f.id, "unknown_id", "no request with id '" + f.id + "' on this connection"));
    it->second->cancel();  // its done frame (finish_reason "cancelled") follows
  }

  // A stream is resumed with the resume_key its generate gave: another client that knows only
  // the id learns nothing, not even whether it exists.
  void resume(const client_frame& f) {
    auto rec = ctx_.resumes.find(owner_, f.id);
    if (!rec || !rec->resumable_with(f.resume_key))
      return send(error_frame(f.id, "unknown_id",
                              "no resumable request with id '" + f.id +
                                  "' and this resume_key (it never existed, was started without a resume_key, "
                                  "or its resumption window passed)"));
    const std::string displaced =
        error_frame(f.id, "resumed_elsewhere", "the stream was resumed on another connection");
    if (!rec->attach(make_sink(), f.from_index, this, displaced))
      return send(error_frame(f.id, "resume_gap", "tokens after index " + std::to_string(f.from_index) +
                                                      " are no longer kept"));
    streams_[f.id] = rec;
  }

  // ---- writing ------------------------------------------------------------------------------
  void send(std::string frame, std::function<void()> written = {}) {
    if (closed_) return;
    queued_bytes_ += frame.size();
    queue_.push_back({std::move(frame), std::move(written)});
    if (queued_bytes_ > ctx_.opts.max_ws_queue_bytes && !slow_) {
      // The reader does not keep up: bounded memory wins. Its streams end; the frames already
      // queued still go out. (See docs/protocol.md, flow control.)
      slow_ = true;
      for (auto& [id, rec] : streams_)
        if (rec->attached_to(this)) rec->cancel();
    }
    if (!writing_) write_next();
  }

  void write_next() {
    if (queue_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(queue_.front().data), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->on_closed();
      self->queued_bytes_ -= self->queue_.front().data.size();
      if (self->queue_.front().written) self->queue_.front().written();
      self->queue_.pop_front();
      self->write_next();
    });
  }

  void on_closed() {
    if (closed_) return;
    closed_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    // Streams with a resume key keep running: the client may come back and resume them within
    // the window. Those without one end now: nobody could ever read them.
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, rec] : streams_) {
      if (!rec->resumable() && rec->attached_to(this)) rec->cancel();
      rec->detach(this, now, ctx_.opts.resume_window);
    }
    streams_.clear();
  }

  server_context& ctx_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::string owner_;
  std::string tenant_;
  bool authed_ = true;
  std::map<std::string, std::shared_ptr<stream_record>> streams_;
  struct out_frame {
    std::string data;
    std::function<void()> written;  // a token frame's acknowledgement
  };
  std::deque<out_frame> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool closed_ = false;
  bool slow_ = false;
};

}  // namespace

void start_ws_session(server_context& ctx, beast::tcp_stream stream, http::request<http::string_body> req,
                      std::string owner, std::string tenant, bool authed) {
  auto s = std::make_shared<ws_session>(ctx, std::move(stream), std::move(owner), std::move(tenant), authed);
  s->run(std::move(req));
}

}  // namespace troupe::net::detail

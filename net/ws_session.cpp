// The WebSocket session of /v1/ws (docs/protocol.md): many requests multiplexed on one socket,
// frames written through one queue per socket on the session's strand, keep-alive pings by
// Beast's idle timeout, and streams recorded in the resume store so that a client can reconnect
// and `resume` without losing or duplicating tokens.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>

#include "net/auth.hpp"
#include "net/detail/conn_stream.hpp"
#include "net/detail/server_context.hpp"
#include "net/detail/unread_gate.hpp"
#include "net/ws_protocol.hpp"
#include "structured/tool_calls.hpp"

namespace troupe::net::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

namespace {

// A client's request id is echoed in every frame of its stream: a long one would multiply the
// bytes sent (a 1 MB id on 256 tokens was 257 MB). Longer ids are refused.
constexpr size_t max_id_bytes = 256;
// Wrong keys in `auth` frames before the socket is closed (1008): guessing keys costs a connection
// per few tries.
constexpr int max_auth_failures = 3;
// Keep-alive pings go out at least every 30 s (half of this), so that proxies and NATs do not drop
// a quiet socket, and a peer that answers none within it is gone.
constexpr std::chrono::seconds max_ping_timeout{60};

class ws_session : public std::enable_shared_from_this<ws_session> {
 public:
  ws_session(server_context& ctx, conn_stream&& s, std::string owner, std::string tenant, bool authed,
             std::shared_ptr<void> slot, std::string refusal) :
      ctx_(ctx), ws_(std::move(s)), owner_(std::move(owner)), tenant_(std::move(tenant)), authed_(authed),
      slot_(std::move(slot)), refusal_(std::move(refusal)), idle_timer_(ws_.get_executor()),
      gate_(ws_.get_executor(), ws_.next_layer().socket().native_handle(), ctx.opts.max_unread_kib * 1024,
            [this] { return queued_bytes_; }) {
    ctx_.met.connection_opened(true);
    if (!refusal_.empty()) ctx_.refusing.fetch_add(1);
  }
  ~ws_session() {
    ctx_.met.connection_closed(true);
    if (!refusal_.empty()) ctx_.refusing.fetch_sub(1);
  }

  void run(http::request<http::string_body> req) {
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout t = websocket::stream_base::timeout::suggested(beast::role_type::server);
    t.idle_timeout = std::min<std::chrono::seconds>(ctx_.opts.ws_idle_timeout, max_ping_timeout);
    t.keep_alive_pings = true;
    ws_.set_option(t);
    ws_.read_message_max(ctx_.opts.max_ws_message_bytes);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "troupe"); }));
    // A client's own pings count as activity (its pongs to ours do not: they only say it is alive).
    ws_.control_callback([this](websocket::frame_type kind, beast::string_view) {
      if (kind == websocket::frame_type::ping) last_activity_ = std::chrono::steady_clock::now();
    });
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      if (!self->refusal_.empty()) {
        // Over the connection limits: the client hears why in a close frame (1013: try again later).
        const bool per_client = self->refusal_.find("per_client") != std::string::npos;
        return self->close_with(websocket::close_code::try_again_later,
                                per_client ? "too many connections from this address (server.max_connections_per_client)"
                                           : "the server is at server.max_connections; retry shortly");
      }
      self->last_activity_ = std::chrono::steady_clock::now();
      self->watch_idle();
      self->do_read();
    });
  }

 private:
  void do_read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  // Streams of this socket still running.
  size_t running_streams() const {
    size_t n = 0;
    for (const auto& [id, rec] : streams_) n += !rec->ended() && rec->attached_to(this);
    return n;
  }

  // Closes a socket whose client sent nothing for server.ws_idle_timeout_s while none of its
  // streams ran (a socket that only answers pings would otherwise stay forever).
  void watch_idle() {
    const auto idle = ctx_.opts.ws_idle_timeout;
    const auto now = std::chrono::steady_clock::now();
    // A running stream is activity: the client is waiting for it. Checked again within a second;
    // the time from that check to the stream's end is counted by make_sink, which restarts the
    // clock as the stream's final frame is queued.
    if (running_streams() > 0) last_activity_ = now;
    const auto due = last_activity_ + idle;
    if (now >= due)
      return close_with(websocket::close_code::going_away,
                        "idle for " + std::to_string(idle.count()) + " s (server.ws_idle_timeout_s)");
    idle_timer_.expires_after(std::min<std::chrono::steady_clock::duration>(due - now, std::chrono::seconds(1)));
    idle_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_ || self->closing_) return;
      self->watch_idle();
    });
  }

  // Sends what is queued, then a close frame with `reason` (at most 123 bytes, RFC 6455 5.5).
  void close_with(websocket::close_code code, std::string reason) {
    if (closed_ || closing_) return;
    closing_ = true;
    if (reason.size() > 123) reason.resize(123);
    close_reason_ = websocket::close_reason(code, reason);
    if (!writing_) write_next();
  }

  void on_read(beast::error_code ec) {
    if (ec) return on_closed();  // closed, timed out, or a message over the limit (close 1009)
    last_activity_ = std::chrono::steady_clock::now();
    if (closing_) {
      // Closing: what the client still sends is not acted on (the read goes on for its close frame).
    } else if (!ws_.got_text()) {
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
    if (p.id.size() > max_id_bytes)  // not echoed: that is what the bound is for
      return send(error_frame({}, "invalid_request",
                              "'id' is " + std::to_string(p.id.size()) + " bytes; at most " +
                                  std::to_string(max_id_bytes) + " are allowed",
                              "id"));
    if (!p.frame) {
      if (p.refused_generate) return refuse(p.error.code, error_frame(p.id, p.error));
      return send(error_frame(p.id, p.error));
    }
    auto& f = *p.frame;
    if (f.type == frame_type::ping) return send(pong_frame(f.id));
    if (f.type == frame_type::auth) return auth(f);
    if (!authed_) {
      std::string e = error_frame(f.id, "unauthorized",
                                  "send {\"type\":\"auth\",\"key\":...} or an Authorization header first");
      return f.type == frame_type::generate ? refuse("unauthorized", std::move(e)) : send(std::move(e));
    }
    switch (f.type) {
      case frame_type::generate: return generate(f);
      case frame_type::cancel: return cancel(f);
      case frame_type::resume: return resume(f);
      default: return;
    }
  }

  // One identity per socket: once a key is accepted (here or in the upgrade's header) another key
  // closes the socket (1008), so a client that switches keys reconnects with the new one. Wrong
  // keys close it after max_auth_failures.
  void auth(const client_frame& f) {
    if (ctx_.opts.api_keys.empty()) return send(R"({"type":"authed"})");  // no keys: nothing to check
    const int idx = find_key(ctx_.opts.api_keys, f.key);
    if (idx < 0) {
      if (++auth_failures_ >= max_auth_failures) {
        send(error_frame(f.id, "unauthorized", "the API key is not valid; closing after " +
                                                   std::to_string(max_auth_failures) + " failed attempts"));
        return close_with(websocket::close_code::policy_error,
                          "too many failed auth attempts (" + std::to_string(max_auth_failures) + ")");
      }
      return send(error_frame(f.id, "unauthorized",
                              "the API key is not valid (attempt " + std::to_string(auth_failures_) + " of " +
                                  std::to_string(max_auth_failures) + ")"));
    }
    if (authed_ && !owner_.empty() && !constant_time_equal(owner_, f.key)) {
      send(error_frame(f.id, "identity_fixed",
                       "this socket is authenticated with another 'key'; open a new connection to use this one"));
      return close_with(websocket::close_code::policy_error, "one identity per socket: reconnect to use another key");
    }
    authed_ = true;
    owner_ = f.key;
    tenant_ = ctx_.opts.tenant_of(idx);
    send(R"({"type":"authed"})");  // so that the client knows it may go on
  }

  // `rec`'s frames, posted to this socket's strand in the order the record hands them over.
  frame_sink make_sink(const std::shared_ptr<stream_record>& rec) {
    std::weak_ptr<ws_session> w = weak_from_this();
    std::weak_ptr<stream_record> r = rec;  // the record holds the sink: no cycle
    return [w, r](std::string frame, std::function<void()> written) {
      if (auto s = w.lock()) {
        auto ex = s->ws_.get_executor();
        asio::post(ex, [s = std::move(s), r, frame = std::move(frame), written = std::move(written)]() mutable {
          s->send(std::move(frame), std::move(written));
          // A stream's end is activity, as its running was: the idle time counts from its final
          // frame (the last one the record posts), not from watch_idle's last tick before it.
          if (auto rec = r.lock(); rec && rec->ended()) s->last_activity_ = std::chrono::steady_clock::now();
        });
      }
    };
  }

  // A generate frame refused before it reaches the pipeline: counted in troupe_requests_total
  // under endpoint "ws" and the error's code, as a pipeline error is.
  void refuse(const std::string& code, std::string frame) {
    ctx_.met.count_request("ws", code);
    send(std::move(frame));
  }

  void generate(client_frame& f) {
    // In flight until its final frame is written (or dropped with the socket), taken before the
    // draining check (see http_session::handle).
    auto hold = std::make_shared<std::shared_ptr<void>>(ctx_.flight());
    if (!ctx_.inf.ready())
      return refuse("loading", error_frame(f.id, "loading", "the model is still loading; retry shortly"));
    if (ctx_.draining)
      return refuse("shutting_down",
                    error_frame(f.id, "shutting_down", "the server is shutting down; retry on another instance"));
    // logit_bias ids are checked against the vocabulary, which only the pipeline knows.
    if (const int32_t nv = ctx_.inf.vocab_size(); nv > 0) {
      for (const auto& b : f.spec.sampling.logit_bias)
        if (b.token >= nv)
          return refuse("invalid_request",
                        error_frame(f.id, "invalid_request",
                                    "'logit_bias." + std::to_string(b.token) + "': token " + std::to_string(b.token) +
                                        " is outside the vocabulary (0.." + std::to_string(nv - 1) + ")",
                                    "logit_bias." + std::to_string(b.token)));
    }
    // Ended streams leave the socket's list (their records stay in the store for the window).
    for (auto it = streams_.begin(); it != streams_.end();) it = it->second->ended() ? streams_.erase(it) : std::next(it);
    if (running_streams() >= ctx_.opts.max_streams_per_connection)
      return refuse("too_many_streams",
                    error_frame(f.id, "too_many_streams",
                                "this connection runs " + std::to_string(ctx_.opts.max_streams_per_connection) +
                                    " streams already (server.max_streams_per_connection); wait for one to end"));
    auto rec = ctx_.resumes.create(owner_, f.id, f.resume_key);
    if (!rec)
      return refuse("duplicate_id",
                    error_frame(f.id, "duplicate_id",
                                "the id '" + f.id + "' is in use (a running stream, or one still resumable)"));
    rec->attach(make_sink(rec), -1, this);
    streams_[f.id] = rec;
    f.spec.tenant = tenant_;
    auto& met = ctx_.met;
    const auto window = ctx_.opts.resume_window;
    const std::string id = f.id;
    // With tools offered the reply is read for calls, which the done frame carries (token frames
    // carry the text as generated).
    std::shared_ptr<structured::tool_call_parser> tools;
    if (auto p = tool_parser_for(ctx_.inf, f.spec)) tools = std::make_shared<structured::tool_call_parser>(std::move(*p));
    // Runs on pipeline threads, one event at a time: records into the stream (which forwards to
    // whoever is attached).
    const bool logprobs = f.spec.logprobs;
    const bool with_top = f.spec.sampling.n_logprobs > 0;
    auto on_event = [rec, id, &met, recorder = request_recorder(met), window, hold, tools, logprobs, with_top,
                     &inf = ctx_.inf, input_field = f.input_field,
                     max_tokens_field = f.max_tokens_field,
                     constraint_field = f.constraint_field](const actors::event& e) mutable {
      const auto now = std::chrono::steady_clock::now();
      recorder.record(e, now);
      if (auto* t = std::get_if<actors::token_event>(&e)) {
        if (tools) tools->push(t->text);
        std::string lp;
        if (logprobs) {
          std::vector<std::pair<std::string, float>> top;
          for (const auto& alt : t->top) top.emplace_back(inf.token_piece(alt.token), alt.logprob);
          lp = token_logprobs_json(inf.token_piece(t->token), t->logprob, top, with_top);
        }
        rec->add_token(t->index, t->text, std::move(lp));
      } else if (auto* d = std::get_if<actors::done_event>(&e)) {
        std::vector<actors::tool_call> calls;
        actors::done_event done = *d;
        if (tools) {
          tools->push(d->text);
          tools->finish();
          for (size_t k = 0; k < tools->calls().size(); ++k)
            calls.push_back({"call_" + id + "_" + std::to_string(k), tools->calls()[k].name, tools->calls()[k].arguments});
          if (!calls.empty() && done.finish_reason == actors::finish::stop) done.finish_reason = "tool_calls";
        }
        met.count_request("ws", done.finish_reason);
        rec->finish(done_frame(id, done, calls), now, window, std::move(*hold));
      } else {
        const auto& er = std::get<actors::error_event>(e);
        met.count_request("ws", er.code);
        // Named as the client spelt its fields (max_completion_tokens, say), as over HTTP.
        rec->finish(pipeline_error_frame(id, er, input_field, max_tokens_field, constraint_field), now, window, std::move(*hold));
      }
    };
    // Manual acks: a token counts as consumed once its frame is written (stream_record) and the
    // socket's unread backlog is under server.max_unread_kib (write_next), so a reader that falls
    // behind pauses its streams at the streamer.
    const auto request = ctx_.inf.submit(std::move(f.spec), std::move(on_event), actors::ack_mode::manual);
    // Every cancel of this stream (a cancel frame, a closed socket, a slow reader, an expired
    // window) goes through the record to the request's handle.
    rec->set_cancel([request] { request.cancel(); });
    rec->set_ack([request](int32_t n) { request.ack(n); });
  }

  // Only a stream this socket started or resumed (and still holds) can be cancelled from it.
  // Every cancel is answered once: a running stream's by its final frame ("cancelled", or its
  // own reason when it ends before the cancel reaches the pipeline: the record sends one final
  // frame), an ended stream's by `already_done`.
  void cancel(const client_frame& f) {
    auto it = streams_.find(f.id);
    if (it == streams_.end() || !it->second->attached_to(this))
      return send(error_frame(f.id, "unknown_id", "no request with id '" + f.id + "' on this connection"));
    if (!it->second->ended()) return it->second->cancel();
    // Its final frame was posted to this strand as it ended, and may still be on its way: posted
    // behind it, this answer never reaches the client before it.
    asio::post(ws_.get_executor(),
               [self = shared_from_this(),
                frame = error_frame(f.id, "already_done",
                                    "the stream '" + f.id + "' has already ended (its final frame was sent); "
                                                            "nothing to cancel")]() mutable {
                 self->send(std::move(frame));
               });
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
    if (!rec->attach(make_sink(rec), f.from_index, this, displaced))
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
      if (closing_ && !closed_ && !close_sent_) {
        close_sent_ = true;
        ws_.async_close(close_reason_, [self = shared_from_this()](beast::error_code) {
          // The pending read ends with the close handshake (or the timeout) and calls on_closed.
        });
      }
      return;
    }
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(queue_.front().data), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->on_closed();
      self->queued_bytes_ -= self->queue_.front().data.size();
      // A token frame is acknowledged once written and the client's unread bytes are under
      // server.max_unread_kib (net/detail/unread_gate.hpp).
      auto written = std::move(self->queue_.front().written);
      self->queue_.pop_front();
      self->gate_.release(std::move(written), self);
      self->write_next();
    });
  }

  void on_closed() {
    if (closed_) return;
    closed_ = true;
    idle_timer_.cancel();
    gate_.stop();
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
  websocket::stream<conn_stream> ws_;  // plain or TLS (net/detail/conn_stream.hpp)
  beast::flat_buffer buffer_;
  std::string owner_;
  std::string tenant_;
  bool authed_ = true;
  std::shared_ptr<void> slot_;  // this connection's place among the open ones
  std::string refusal_;         // over the connection limits: closed at once
  asio::steady_timer idle_timer_;
  std::chrono::steady_clock::time_point last_activity_ = std::chrono::steady_clock::now();
  int auth_failures_ = 0;
  bool closing_ = false;        // a close frame is to follow the queued frames
  bool close_sent_ = false;
  websocket::close_reason close_reason_;
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
  unread_gate gate_;  // holds token acknowledgements while the client's unread bytes are over the bound
};

}  // namespace

void start_ws_session(server_context& ctx, conn_stream stream, http::request<http::string_body> req,
                      std::string owner, std::string tenant, bool authed, std::shared_ptr<void> slot,
                      std::string refusal) {
  auto s = std::make_shared<ws_session>(ctx, std::move(stream), std::move(owner), std::move(tenant), authed,
                                        std::move(slot), std::move(refusal));
  s->run(std::move(req));
}

}  // namespace troupe::net::detail

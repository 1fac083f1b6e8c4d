// The completion endpoints' part of the HTTP session (net/http_session.hpp): each choice's
// request submitted to the pipeline, and what each event's step (net/completion_assembly.hpp)
// says written: a whole answer, or a server-sent-event stream with flow control on the client's
// unread bytes (net/detail/unread_gate.hpp), and the probe of a client that closed its side.
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <cstdio>
#include <ctime>

#include "net/http_session.hpp"
#include "net/openai_codec.hpp"

namespace troupe::net::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

// The completion's choices, chunks and answer are net/completion_assembly.hpp's (a response's,
// net/responses_assembly.hpp's); the session submits the requests and writes what each event's
// step says.
void http_session::start_completion(openai_request req, const std::string& tenant) {
  if (auto e = completion_.begin(req, chat_, unix_now(), ctx_.inf)) return send_error(*e);
  answer_ = &completion_;
  run_answer(std::move(req.spec), tenant);
}

// The answer begun (answer_) runs: its first choice is submitted.
void http_session::run_answer(actors::request_spec spec, const std::string& tenant) {
  spec.tenant = tenant;
  stream_.expires_never();
  ++generation_;
  recorders_.assign(answer_->size(), request_recorder(ctx_.met));
  spec_ = std::move(spec);
  submit_choice(0);
  watch_disconnect();  // also keeps this session alive while the request runs
}

// Choice i is its own request (answer_assembly::choice_spec: its seed, its prompt; greedy ones
// are equal, as OpenAI's). Choice 0 goes first, the others once its first token is out: by then
// its prompt's KV blocks are in the prefix cache and the others share them instead of computing
// them again.
void http_session::submit_choice(size_t i) {
  actors::request_spec spec = answer_->choice_spec(i, spec_);
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
      answer_->streaming() ? actors::ack_mode::manual : actors::ack_mode::on_handoff));
}

// Choice i's token event just handled is acknowledged once what it queued (if anything) is
// written, through the gate (net/detail/unread_gate.hpp).
void http_session::ack_when_written(size_t i) {
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

void http_session::on_event(uint64_t gen, size_t i, const actors::event& e) {
  // A choice cancelled with its siblings may still answer after the completion ended (or after
  // the next request on this connection began): ignored.
  if (closed_ || gen != generation_ || !answer_->accepts(i)) return;
  recorders_[i].record(e, std::chrono::steady_clock::now());
  const bool token = std::holds_alternative<actors::token_event>(e);
  auto s = answer_->feed(i, e);
  if (s.answer || s.end_stream) keep_response();
  if (s.submit_others)
    for (size_t k = 1; k < answer_->size(); ++k) submit_choice(k);
  if (s.cancel) request_.cancel();
  if (s.error) {
    if (whole_head_out_) return end_whole(error_json(*s.error), s.error->status);
    if (s.retry_after_s > 0) retry_after_s_ = s.retry_after_s;
    return send_error(*s.error);
  }
  if (s.answer) {
    if (whole_head_out_) return end_whole(std::move(*s.answer), 200);
    return send(http::status::ok, std::move(*s.answer), "application/json");
  }
  if (answer_->stream_open() && !head_counted_) count_head();  // opened early by probe_reader
  if (s.open_stream) send_sse_head();
  for (auto& ev : s.events) queue_chunk(std::move(ev));
  if (s.end_stream) return end_sse();
  if (token && answer_->streaming()) ack_when_written(i);
}

// The CORS headers set_headers writes, for the hand-written head of a server-sent-event stream.
std::string http_session::cors_header_lines() const {
  if (cors_origin_.empty()) return {};
  return "Access-Control-Allow-Origin: " + cors_origin_ + "\r\nVary: Origin\r\n";
}

void http_session::send_sse_head(bool count) {
  if (count) count_head();
  send_head("text/event-stream\r\nCache-Control: no-cache");
}

// A 200 whose body follows in parts (a stream's events, or a whole answer probed early). HTTP/1.0
// has no chunked coding (RFC 9112 6.1: only for an HTTP/1.1 request): the parts go out as they
// are and the closed connection ends the body.
void http_session::send_head(const char* content_type) {
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;
  std::string h = std::string(chunked_ ? "HTTP/1.1" : "HTTP/1.0") + " 200 OK\r\nServer: troupe\r\nContent-Type: " +
                  content_type + "\r\n" + (chunked_ ? "Transfer-Encoding: chunked\r\n" : "") + cors_header_lines();
  h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  queue_raw(std::move(h));
}

// A whole answer whose head went out early (probe_reader): its body (an error's object if it
// failed, under the 200 already sent), counted under the status it would have had.
void http_session::end_whole(std::string body, int status) {
  head_counted_ = true;
  ctx_.met.count_request(endpoint_, std::to_string(status));
  queue_chunk(std::move(body));
  if (chunked_) queue_raw("0\r\n\r\n");
  finishing_ = true;
  if (!writing_) after_stream();
}

// A stream counts as 200 once, when its head goes out with its first event.
void http_session::count_head() {
  if (head_counted_) return;
  head_counted_ = true;
  ctx_.met.count_request(endpoint_, "200");
}

void http_session::end_sse() {
  if (answer_->done_line()) queue_chunk(std::string(sse_done));
  if (chunked_) queue_raw("0\r\n\r\n");
  finishing_ = true;
  if (!writing_) after_stream();
}

void http_session::queue_chunk(std::string data) {
  if (!chunked_) return queue_raw(std::move(data));
  char hex[20];
  std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
  data.insert(0, hex);
  data += "\r\n";
  queue_raw(std::move(data));
}

void http_session::queue_raw(std::string data) {
  queued_bytes_ += data.size();
  queue_.push_back({std::move(data), {}});
  if (!writing_) write_next();
}

void http_session::write_next() {
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

// A completion's client closed its side: a write every second tells a client that left from one
// that half-closed (request_reading::probe says why).
void http_session::probe_reader(bool timer) {
  if (!request_) return;  // a timer of a request answered meanwhile (its cancel came too late)
  const bool whole = !answer_->streaming();
  switch (request_reading::probe(closed_, finishing_, answer_->ended(), whole ? whole_head_out_ : answer_->stream_open())) {
    case request_reading::probe_action::stop:
      return;
    case request_reading::probe_action::open_stream: {
      // A whole answer's head waits a second: a refusal that comes at once (429 with its
      // Retry-After, 400 context_length_exceeded) keeps its status for a client that half-closed.
      if (whole && !timer) break;
      if (whole) {
        whole_head_out_ = true;
        send_head("application/json");  // counted when the answer comes (or 499)
        queue_chunk(" ");
        break;
      }
      auto s = answer_->open_stream_now();
      if (s.open_stream) send_sse_head(/*count=*/false);  // counted when the answer comes (or 499)
      for (auto& ev : s.events) queue_chunk(std::move(ev));
      break;
    }
    case request_reading::probe_action::comment:
      queue_chunk(whole ? " " : ": waiting for the model\n\n");
      break;
  }
  probe_timer_.expires_after(std::chrono::seconds(1));
  probe_timer_.async_wait([self = shared_from_this(), gen = generation_](beast::error_code ec) {
    if (!ec && gen == self->generation_) self->probe_reader(true);
  });
}

void http_session::after_stream() {
  if (closed_ || !finishing_ || writing_) return;
  finishing_ = false;
  flight_.reset();  // the stream's last chunk is written
  if (!keep_alive_) return close();
  reset_request_state();
  next_request();
}

}  // namespace troupe::net::detail

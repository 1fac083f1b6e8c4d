#pragma once
// The HTTP session of one connection (the listener, server.cpp, hands it over with
// start_http_session, net/detail/server_context.hpp). Private to its three translation units:
// http_session.cpp (TLS, reading, routing, plain answers, closing),
// http_session_completion.cpp (the completion endpoints' answers and server-sent events) and
// http_session_responses.cpp (the Responses API's routes and its stored responses).
// What a read's result means is decided by net/detail/request_reading.hpp; this class does the
// Beast I/O. Each connection runs on its own strand; pipeline events arrive on actor threads and
// are posted onto it, so a session's state is only touched on its strand.
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/client.hpp"
#include "actors/request.hpp"
#include "net/api_error.hpp"
#include "net/completion_assembly.hpp"
#include "net/detail/conn_stream.hpp"
#include "net/detail/request_reading.hpp"
#include "net/detail/server_context.hpp"
#include "net/detail/unread_gate.hpp"
#include "net/metrics.hpp"
#include "net/responses_assembly.hpp"

namespace troupe::net::detail {

// The 401 of a request without a valid API key (auth.api_keys).
api_error unauthorised();

class http_session : public std::enable_shared_from_this<http_session> {
 public:
  using request_header = boost::beast::http::request_parser<boost::beast::http::string_body>::value_type;
  using request = boost::beast::http::request<boost::beast::http::string_body>;

  http_session(server_context& ctx, boost::asio::ip::tcp::socket&& s, boost::asio::ssl::context* tls,
               std::shared_ptr<void> slot, std::string refusal);
  ~http_session();

  void run();

 private:
  // ---- TLS (server.tls_cert) ----
  void handshake();
  void refuse_plain_http();

  // ---- reading and routing (http_session.cpp) ----
  void do_read();
  std::string_view buffered() const;  // what has been read and not yet parsed
  void on_header(boost::beast::error_code ec);
  bool refused_on_header(const request_header& h);
  std::optional<api_error> check_header(const request_header& h);
  void refuse(const request_header& h);
  void stop_read_timer();
  void on_read(boost::beast::error_code ec);
  std::optional<std::pair<std::string, std::string>> authorise(const request& req);
  void handle(request&& req);
  template <class T, class Start, class Write>
  void await_reply(Start start, Write write);
  void method_not_allowed(const std::string& path, const char* why = "");
  void watch_disconnect();

  // ---- plain responses and closing (http_session.cpp) ----
  void send(boost::beast::http::status st, std::string body, const char* content_type);
  template <class Response>
  void set_headers(Response& res, const char* content_type);
  template <class Response>
  void write(const std::shared_ptr<Response>& res);
  void next_request();
  void send_error(const api_error& e);
  void send_health();   // /health and /metrics, once their figures are fresh (inference::fresh_figures)
  void send_metrics();
  void reset_request_state();
  void close();
  void close_tcp();
  void linger();

  // ---- completions (http_session_completion.cpp) ----
  void start_completion(openai_request req, const std::string& tenant);
  void run_answer(actors::request_spec spec, const std::string& tenant);
  void submit_choice(size_t i);
  void ack_when_written(size_t i);
  void on_event(uint64_t gen, size_t i, const actors::event& e);
  void send_sse_head(bool count = true);
  void send_head(const char* content_type);
  void end_whole(std::string body, int status);
  std::string cors_header_lines() const;
  void count_head();
  void end_sse();
  void queue_chunk(std::string data);
  void queue_raw(std::string data);
  void write_next();
  void probe_reader(bool timer = false);  // `timer`: its second-by-second round
  void after_stream();

  // ---- the Responses API (http_session_responses.cpp) ----
  void handle_responses(const request& req, const std::string& path);
  void start_response(responses_request req, const std::string& tenant);
  void keep_response();
  std::string stored_key(const std::string& id) const;  // the store's key: the id, per API key

  server_context& ctx_;
  conn_stream stream_;          // plain TCP, or TLS (net/detail/conn_stream.hpp)
  std::string plain_answer_;    // the 400 to plain HTTP on the TLS port
  bool response_writing_ = false;  // an http::async_write is under way
  std::shared_ptr<void> slot_;  // this connection's place among the open ones (none: refused)
  std::string refusal_;         // why it is refused
  std::string cors_origin_;     // the request's allowed Origin (empty: none)
  bool head_counted_ = false;   // the stream's 200 is counted (count_head)
  bool whole_head_out_ = false; // a whole answer's head went out early, to probe the client (probe_reader)
  request_reading reading_;     // the read deadline, half-close and watch read's state
  boost::asio::steady_timer read_timer_{stream_.get_executor()};   // the request's read deadline
  boost::asio::steady_timer probe_timer_{stream_.get_executor()};  // probe_reader's next write
  std::shared_ptr<http_session> hold_self_;  // alive while a half-closed client's answer is due
  std::array<char, 4096> drain_{};
  size_t lingered_ = 0;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool keep_alive_ = true;
  bool head_request_ = false;
  std::shared_ptr<void> flight_;  // ctx_.flight() while a request is handled
  unsigned version_ = 11;
  bool chunked_ = true;  // the stream's body in chunked coding (HTTP/1.1) or as is (HTTP/1.0)
  std::string endpoint_ = "other";
  int64_t retry_after_s_ = 0;
  bool should_retry_false_ = false;  // the next answer carries x-should-retry: false (api_error::no_retry)
  const char* allow_ = nullptr;  // a 405's Allow header (RFC 9110 15.5.6): the methods the path takes
  bool closed_ = false;
  // The running answer: a completion, or a response (the Responses API); answer_ points at the
  // one running (at completion_ between requests).
  bool chat_ = true;
  completion_assembly completion_;
  responses_assembly responses_;
  answer_assembly* answer_ = &completion_;
  std::string owner_;  // the request's API key ("" without keys): whose stored responses it sees
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
  actors::request_spec spec_;         // what each choice's request is made from (choice_spec)
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
  unread_gate gate_;  // holds token acknowledgements while the client's unread bytes are over the bound
};

// The error answers both translation units build: `message` with an HTTP status and a code.
inline api_error bad_status(int status, std::string message, std::string code) {
  return request_reading::with_status(status, std::move(message), std::move(code));
}

}  // namespace troupe::net::detail

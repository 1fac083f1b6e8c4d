#pragma once
// The decisions of reading HTTP requests off one connection, without Beast: the session
// (net/http_session.cpp) does the I/O and asks this class what each result means. It covers the
// read deadline and its 408, the empty lines before a request line, `Expect: 100-continue`, what
// a read error is answered with, a client that half-closed, and the watch read that runs while a
// request is handled (a pipelined request, a half-close, a reset), down to the probe of a
// streamed request's client that closed its side.
//
// One per connection, used on the session's strand only.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "net/api_error.hpp"

namespace troupe::net::detail {

class request_reading {
 public:
  // A refused connection (over max_connections) gets at most this long to send its request; the
  // session's linger after a closing answer takes at most this long too.
  static constexpr std::chrono::seconds linger_time{5};
  // The stream's own timeout runs this much past the read deadline: the backstop that closes the
  // socket whatever happens (the deadline itself is answered 408).
  static constexpr std::chrono::seconds backstop{2};
  static constexpr size_t header_limit_bytes = 16 * 1024;

  // `read_timeout`: server.http_read_timeout_s; `max_body_bytes`: server.max_body_bytes;
  // `refused`: the connection is over a connection limit (answered 503, then closed).
  request_reading(std::chrono::seconds read_timeout, size_t max_body_bytes, bool refused);

  // The time a request (or a TLS handshake) has to arrive in full.
  std::chrono::seconds read_time() const;

  // ---- a request's read -----------------------------------------------------------------
  enum class start_action {
    read,    // read a request (its deadline starts now)
    close,   // the client half-closed and nothing of a request is left: close without an answer
    answer,  // the client half-closed inside a request's header: answer `error`, then close
  };
  struct start {
    size_t skip = 0;  // leading bytes to drop first (empty lines before a request line)
    start_action what = start_action::read;
    std::optional<api_error> error;
  };
  // Before the next request is read, given what is buffered of it already.
  start begin(std::string_view buffered);
  // Whether what is buffered starts with an empty line (RFC 9112 2.2: ignored before a request
  // line): one that arrived on its own reaches the parser, which calls it a bad method.
  static bool starts_with_empty_line(std::string_view buffered) { return buffered.substr(0, 2) == "\r\n"; }

  // The read deadline passed: true when a read is under way, which the session then cancels
  // (its handler's finish() answers 408).
  bool deadline_passed();
  void header_read() { header_done_ = true; }
  // The request is read, or will not be: its deadline no longer applies.
  void stop() { reading_ = false; }

  enum class body_action {
    none,           // the request is complete (no body, or the body came with the header)
    final_status,   // `Expect: 100-continue` and refused on the header alone: answered with the
                    // final status instead of the 100, so the body is never sent (RFC 9110
                    // 10.1.1), and the connection closes (its body is unread)
    send_continue,  // write `100 Continue`, then read the body
    read,           // read the body
  };
  // What follows a header that passed the session's checks. `refused_on_header()` says whether
  // routing will refuse the request whatever its body; it is asked only when the client waits
  // for a 100 (curl waits a second, others longer). A body over the limit never gets here: Beast's
  // parser checks Content-Length against the limit with the header (finish() answers 413).
  template <class RefusedOnHeader>
  static body_action body(bool complete, unsigned version, std::string_view expect,
                          RefusedOnHeader&& refused_on_header) {
    if (complete) return body_action::none;
    if (!expects_continue(version, expect)) return body_action::read;
    return refused_on_header() ? body_action::final_status : body_action::send_continue;
  }
  // `Expect: 100-continue` (curl sends it for bodies over 1 KiB) on an HTTP/1.1 request.
  static bool expects_continue(unsigned version, std::string_view expect);

  // How a read ended, as the session's Beast error code says it.
  enum class read_error {
    none,
    end_of_stream,  // the client closed its side
    body_limit,     // the body is over server.max_body_bytes (Content-Length or read)
    header_limit,   // the header is over header_limit_bytes
    malformed,      // Beast's parser refused the request (the code's message says why)
    other,          // a socket error, or the read cancelled
  };
  enum class finish_action {
    handle,  // the request is in: route it
    close,   // close without an answer
    answer,  // answer `error`, then close (the rest of the request is unread)
  };
  struct finish_step {
    finish_action what = finish_action::handle;
    std::optional<api_error> error;
    bool half_closed = false;     // answer: the client half-closed inside a request
    bool endpoint_other = false;  // answer: counted under "other" (the target may be cut short)
  };
  // A read (the header's or the body's) ended with `error` (`message`: Beast's, for malformed);
  // `buffered`: bytes held past what the parser took; `got_some`: the parser has begun a request.
  finish_step finish(read_error error, std::string_view message, size_t buffered, bool got_some);

  // ---- the watch read --------------------------------------------------------------------
  // While a request is handled nobody reads the socket; one pending read (the watch) notices a
  // client that goes away at once, and takes in a pipelined request meanwhile.
  void watch_started() { watching_ = true; }
  bool watching() const { return watching_; }
  // The client half-closed (the watch read its end): nothing more will come.
  bool peer_closed() const { return peer_closed_; }
  // The session wants the next request read: true when the watch read must be cancelled first
  // (its handler then reads on).
  bool next_request_waits();

  enum class watch_result {
    data,     // bytes came (committed to the buffer)
    aborted,  // the read was cancelled
    eof,      // the client half-closed
    failed,   // a reset or another socket error
  };
  enum class watch_action {
    linger,         // the session closed meanwhile: drop what still comes, then close
    close,          // the client went away (or sent more than a body may hold): close
    read_next,      // read the next request
    reset_and_read, // forget the request just answered, then read the next one
    watch_again,    // the request still runs: go on watching
    probe,          // a completion goes on for a half-closed client: probe it
    idle,           // nothing to do (the answer is on its way)
  };
  struct watch_step {
    watch_action what = watch_action::idle;
    bool hold = false;  // keep the session alive: a half-closed client's answer is still due
  };
  // What the session knows when the watch read ends.
  struct watch_facts {
    bool closed = false;     // the session is closing
    size_t buffered = 0;     // bytes held, what this read brought included
    bool ended = true;       // the running completion (if any) has ended
    bool answering = false;  // it is a completion or a response (streamed or whole), not another wait
    bool writing = false;    // a write of its stream is under way
  };
  watch_step watch_ended(watch_result result, const watch_facts& facts);

  enum class probe_action {
    stop,         // nothing left to probe
    open_stream,  // open the stream now (its head and first chunks, as a first token would)
    comment,      // write an SSE comment, which clients skip
  };
  // A client that closed its side during a completion has either half-closed (it still reads) or
  // left: a chat page's stop button, or a client's timeout (the openai library's, which then
  // retries: each try left running would multiply the work). Only a write tells them apart: a
  // client that left answers it with a reset, and the write after that fails, which cancels the
  // request. So the answer's head goes out (a stream's at once, a whole answer's after a second, so
  // that a refusal that comes at once keeps its status) and a filler every second until it ends:
  // an SSE comment in a stream; in a whole answer (200, chunked) a space, which JSON allows before
  // a value. The price, for a client that half-closed: an error after that is an error object
  // under the 200 already sent. (nginx and uvicorn treat a FIN as the client leaving.)
  static probe_action probe(bool closed, bool finishing, bool ended, bool head_out);

  // The errors this class answers with, for the session's own uses of them.
  static api_error with_status(int status, std::string message, std::string code);
  static api_error half_closed_inside_request();

 private:
  std::chrono::seconds read_timeout_;
  size_t max_body_bytes_;
  bool refused_;
  bool reading_ = false;        // a request is being read (its deadline runs)
  bool header_done_ = false;    // its header is in
  bool timed_out_ = false;      // the deadline cancelled the read
  bool peer_closed_ = false;
  bool watching_ = false;       // the watch read is pending
  bool resume_after_watch_ = false;  // the next request is read once the watch read has stopped
};

}  // namespace troupe::net::detail

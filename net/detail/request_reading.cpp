#include "net/detail/request_reading.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace troupe::net::detail {

request_reading::request_reading(std::chrono::seconds read_timeout, size_t max_body_bytes, bool refused) :
    read_timeout_(read_timeout), max_body_bytes_(max_body_bytes), refused_(refused) {}

std::chrono::seconds request_reading::read_time() const {
  return refused_ ? std::min<std::chrono::seconds>(read_timeout_, linger_time) : read_timeout_;
}

api_error request_reading::with_status(int status, std::string message, std::string code) {
  api_error e = bad_request(std::move(message), {}, std::move(code));
  e.status = status;
  return e;
}

api_error request_reading::half_closed_inside_request() {
  return with_status(400, "the client closed its side of the connection inside a request's header", "bad_http");
}

request_reading::start request_reading::begin(std::string_view buffered) {
  start s;
  // RFC 9112 2.2: empty lines before a request line are ignored (some clients send a CRLF after
  // a POST's body), where they have arrived with what came before.
  while (buffered.size() - s.skip >= 2 && buffered.substr(s.skip, 2) == "\r\n") s.skip += 2;
  const std::string_view held = buffered.substr(s.skip);
  if (peer_closed_) {
    if (held.empty()) {
      s.what = start_action::close;  // nothing more can come
      return s;
    }
    // Part of a pipelined request and then the end: the socket's end was read once, so a read
    // would only wait for the deadline. A header still unfinished is answered at once.
    if (held.find("\r\n\r\n") == std::string_view::npos) {
      s.what = start_action::answer;
      s.error = half_closed_inside_request();
      return s;
    }
  }
  header_done_ = false;
  reading_ = true;
  return s;
}

bool request_reading::deadline_passed() {
  if (!reading_) return false;
  timed_out_ = true;
  return true;
}

bool request_reading::expects_continue(unsigned version, std::string_view expect) {
  static constexpr std::string_view want = "100-continue";
  return version >= 11 && expect.size() == want.size() &&
         std::equal(expect.begin(), expect.end(), want.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

request_reading::finish_step request_reading::finish(read_error error, std::string_view message, size_t buffered,
                                                     bool got_some) {
  finish_step s;
  s.what = finish_action::answer;
  if (std::exchange(timed_out_, false) && error != read_error::none) {
    // Nothing of a next request: an idle keep-alive or a silent connection just closes. A
    // request begun (part of its header, or its body unfinished) is told why (RFC 9110 15.5.9).
    if (refused_ || (!header_done_ && buffered == 0 && !got_some)) {
      s.what = finish_action::close;
      return s;
    }
    s.error = with_status(408,
                          "the request did not arrive in full within " + std::to_string(read_timeout_.count()) +
                              " s (server.http_read_timeout_s)",
                          "request_timeout");
    return s;
  }
  switch (error) {
    case read_error::none:
      s.what = finish_action::handle;
      return s;
    case read_error::end_of_stream:
      if (buffered == 0) {
        s.what = finish_action::close;  // between requests: the client is done
        return s;
      }
      // Part of a request (a pipelined one the parser had not begun on), then the end.
      s.error = half_closed_inside_request();
      s.half_closed = true;
      return s;
    case read_error::body_limit:
      s.error = with_status(413,
                            "the body is larger than " + std::to_string(max_body_bytes_) +
                                " bytes (server.max_body_bytes)",
                            "body_too_large");
      s.error->param = "body";
      return s;
    case read_error::header_limit:
      s.error = with_status(431, "the request headers are larger than " + std::to_string(header_limit_bytes) + " bytes",
                            "headers_too_large");
      s.endpoint_other = true;
      return s;
    case read_error::malformed:
      s.error = with_status(400, "malformed HTTP request: " + std::string(message), "bad_http");
      return s;
    case read_error::other:
      break;
  }
  s.what = finish_action::close;
  return s;
}

bool request_reading::next_request_waits() {
  if (!watching_) return false;
  resume_after_watch_ = true;
  return true;
}

request_reading::watch_step request_reading::watch_ended(watch_result result, const watch_facts& f) {
  watching_ = false;
  watch_step s;
  if (f.closed) {
    s.what = watch_action::linger;
    return s;
  }
  switch (result) {
    case watch_result::data:
      // A pipelined request: parsed once this one ends.
      if (f.buffered > max_body_bytes_) s.what = watch_action::close;
      else if (std::exchange(resume_after_watch_, false)) s.what = watch_action::read_next;
      else s.what = f.ended ? watch_action::idle : watch_action::watch_again;
      return s;
    case watch_result::aborted:
      s.what = std::exchange(resume_after_watch_, false) ? watch_action::reset_and_read : watch_action::close;
      return s;
    case watch_result::eof:
      // Half-closed (shutdown(SHUT_WR), `nc -N`), or gone: the client sent all it will send. Its
      // request goes on (a completion is probed, see probe()); only a reset or a failed write
      // means it is gone. Nothing else holds the session meanwhile.
      peer_closed_ = true;
      s.hold = !f.ended || f.writing;
      if (std::exchange(resume_after_watch_, false)) s.what = watch_action::reset_and_read;
      else if (f.answering && !f.ended) s.what = watch_action::probe;
      return s;
    case watch_result::failed:
      break;
  }
  s.what = watch_action::close;  // the client went away (reset): cancels the request
  return s;
}

request_reading::probe_action request_reading::probe(bool closed, bool finishing, bool ended, bool head_out) {
  if (closed || finishing || ended) return probe_action::stop;
  return head_out ? probe_action::comment : probe_action::open_stream;
}

}  // namespace troupe::net::detail

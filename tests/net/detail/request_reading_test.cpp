// net/detail/request_reading: what each step of reading a request means, without a socket. The
// session's I/O around it: tests/clients/test_http_edges.py and test_hostile_clients.py.
#include <gtest/gtest.h>

#include "net/detail/request_reading.hpp"

using namespace std::chrono_literals;
using troupe::net::detail::request_reading;
using start_action = request_reading::start_action;
using body_action = request_reading::body_action;
using read_error = request_reading::read_error;
using finish_action = request_reading::finish_action;
using watch_result = request_reading::watch_result;
using watch_action = request_reading::watch_action;
using probe_action = request_reading::probe_action;

namespace {

constexpr size_t max_body = 1000;

request_reading reading(std::chrono::seconds timeout = 30s, bool refused = false) {
  return request_reading(timeout, max_body, refused);
}

// The watch read ended with the client's half-close while a request ran.
void half_close(request_reading& r) {
  r.watch_started();
  r.watch_ended(watch_result::eof, {false, 0, false, false, false});
}

}  // namespace

TEST(request_reading, a_refused_connection_gets_at_most_the_linger_time) {
  EXPECT_EQ(reading(30s).read_time(), 30s);
  EXPECT_EQ(reading(30s, true).read_time(), request_reading::linger_time);
  EXPECT_EQ(reading(2s, true).read_time(), 2s);
}

TEST(request_reading, empty_lines_before_a_request_line_are_skipped) {
  auto r = reading();
  EXPECT_EQ(r.begin("").skip, 0u);
  EXPECT_EQ(r.begin("\r\nGET / HTTP/1.1\r\n").skip, 2u);
  EXPECT_EQ(r.begin("\r\n\r\n\r\nPOST").skip, 6u);
  EXPECT_EQ(r.begin("\r").skip, 0u) << "half an empty line waits for the rest";
  EXPECT_EQ(r.begin("\n\r\nGET").skip, 0u) << "a bare LF is no empty line here";
  EXPECT_EQ(r.begin("GET /\r\n\r\n").skip, 0u);
  EXPECT_EQ(r.begin("\r\nGET").what, start_action::read);
}

TEST(request_reading, a_half_closed_client_with_nothing_left_is_closed_without_an_answer) {
  auto r = reading();
  half_close(r);
  EXPECT_TRUE(r.peer_closed());
  EXPECT_EQ(r.begin("").what, start_action::close);
  const auto s = r.begin("\r\n\r\n");
  EXPECT_EQ(s.skip, 4u);
  EXPECT_EQ(s.what, start_action::close) << "empty lines are nothing of a request";
}

TEST(request_reading, a_half_closed_client_inside_a_header_is_answered_at_once) {
  auto r = reading();
  half_close(r);
  const auto s = r.begin("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
  ASSERT_EQ(s.what, start_action::answer);
  ASSERT_TRUE(s.error);
  EXPECT_EQ(s.error->status, 400);
  EXPECT_EQ(s.error->code, "bad_http");
  EXPECT_NE(s.error->message.find("closed its side"), std::string::npos) << s.error->message;
  EXPECT_FALSE(r.deadline_passed()) << "no read starts, so no deadline runs";
  // A whole header is read and answered as any request.
  EXPECT_EQ(r.begin("GET / HTTP/1.1\r\nHost: x\r\n\r\n").what, start_action::read);
}

TEST(request_reading, the_deadline_applies_only_while_a_request_is_read) {
  auto r = reading();
  EXPECT_FALSE(r.deadline_passed()) << "nothing is read yet";
  r.begin("");
  EXPECT_TRUE(r.deadline_passed());
  r.stop();
  EXPECT_FALSE(r.deadline_passed()) << "stopped: a late timer does nothing";
}

TEST(request_reading, a_timed_out_silent_connection_just_closes) {
  auto r = reading();
  r.begin("");
  ASSERT_TRUE(r.deadline_passed());
  EXPECT_EQ(r.finish(read_error::other, {}, 0, false).what, finish_action::close);
}

TEST(request_reading, a_request_begun_and_not_finished_in_time_is_answered_408) {
  for (int begun = 0; begun < 3; ++begun) {
    auto r = reading(7s);
    r.begin("");
    if (begun == 2) r.header_read();
    ASSERT_TRUE(r.deadline_passed());
    const auto s = r.finish(read_error::other, {}, begun == 0 ? 5 : 0, begun == 1);
    ASSERT_EQ(s.what, finish_action::answer) << begun;
    ASSERT_TRUE(s.error);
    EXPECT_EQ(s.error->status, 408);
    EXPECT_EQ(s.error->code, "request_timeout");
    EXPECT_NE(s.error->message.find("within 7 s (server.http_read_timeout_s)"), std::string::npos) << s.error->message;
  }
}

TEST(request_reading, a_refused_connection_that_times_out_is_closed) {
  auto r = reading(30s, true);
  r.begin("");
  r.header_read();
  ASSERT_TRUE(r.deadline_passed());
  EXPECT_EQ(r.finish(read_error::other, {}, 10, true).what, finish_action::close);
}

TEST(request_reading, the_timeout_is_answered_once) {
  auto r = reading();
  r.begin("");
  r.header_read();
  ASSERT_TRUE(r.deadline_passed());
  // The read finished before the cancel took effect: the request goes on, and the flag is spent.
  EXPECT_EQ(r.finish(read_error::none, {}, 0, true).what, finish_action::handle);
  EXPECT_EQ(r.finish(read_error::other, {}, 0, true).what, finish_action::close);
}

TEST(request_reading, read_errors_are_answered_and_close_the_connection) {
  auto r = reading();
  r.begin("");
  EXPECT_EQ(r.finish(read_error::none, {}, 0, true).what, finish_action::handle);
  EXPECT_EQ(r.finish(read_error::other, {}, 0, true).what, finish_action::close);
  EXPECT_EQ(r.finish(read_error::end_of_stream, {}, 0, false).what, finish_action::close)
      << "between requests: the client is done";

  const auto cut = r.finish(read_error::end_of_stream, {}, 12, false);
  ASSERT_EQ(cut.what, finish_action::answer);
  EXPECT_EQ(cut.error->status, 400);
  EXPECT_TRUE(cut.half_closed);

  const auto big = r.finish(read_error::body_limit, {}, 0, true);
  ASSERT_EQ(big.what, finish_action::answer);
  EXPECT_EQ(big.error->status, 413);
  EXPECT_EQ(big.error->code, "body_too_large");
  EXPECT_EQ(big.error->param, "body");
  EXPECT_NE(big.error->message.find("1000 bytes (server.max_body_bytes)"), std::string::npos) << big.error->message;
  EXPECT_FALSE(big.endpoint_other);

  const auto headers = r.finish(read_error::header_limit, {}, 0, true);
  ASSERT_EQ(headers.what, finish_action::answer);
  EXPECT_EQ(headers.error->status, 431);
  EXPECT_EQ(headers.error->code, "headers_too_large");
  EXPECT_NE(headers.error->message.find("16384 bytes"), std::string::npos);
  EXPECT_TRUE(headers.endpoint_other);

  const auto bad = r.finish(read_error::malformed, "bad method", 0, true);
  ASSERT_EQ(bad.what, finish_action::answer);
  EXPECT_EQ(bad.error->status, 400);
  EXPECT_EQ(bad.error->code, "bad_http");
  EXPECT_EQ(bad.error->message, "malformed HTTP request: bad method");
  EXPECT_FALSE(bad.half_closed);
}

TEST(request_reading, expect_100_continue_is_answered_with_a_100_or_the_final_status) {
  int asked = 0;
  auto refused = [&] { return ++asked, true; };
  auto accepted = [&] { return ++asked, false; };
  EXPECT_EQ(request_reading::body(false, 11, "100-continue", accepted), body_action::send_continue);
  EXPECT_EQ(request_reading::body(false, 11, "100-Continue", accepted), body_action::send_continue);
  EXPECT_EQ(request_reading::body(false, 11, "100-continue", refused), body_action::final_status);
  EXPECT_EQ(asked, 3);
  // No 100 to wait for: the body is read, and routing is not asked ahead of it.
  EXPECT_EQ(request_reading::body(false, 11, "", refused), body_action::read);
  EXPECT_EQ(request_reading::body(false, 10, "100-continue", refused), body_action::read) << "HTTP/1.0";
  EXPECT_EQ(request_reading::body(false, 11, "100-continue, x", refused), body_action::read);
  EXPECT_EQ(request_reading::body(true, 11, "100-continue", refused), body_action::none)
      << "the body came with the header";
  EXPECT_EQ(asked, 3);
}

TEST(request_reading, next_request_waits_for_a_pending_watch_read) {
  auto r = reading();
  EXPECT_FALSE(r.next_request_waits());
  r.watch_started();
  EXPECT_TRUE(r.watching());
  EXPECT_TRUE(r.next_request_waits());
  // The cancelled watch read resumes: the answered request is forgotten, the next one read.
  const auto s = r.watch_ended(watch_result::aborted, {});
  EXPECT_EQ(s.what, watch_action::reset_and_read);
  EXPECT_FALSE(r.watching());
  r.watch_started();
  EXPECT_EQ(r.watch_ended(watch_result::aborted, {}).what, watch_action::close) << "cancelled by close()";
}

TEST(request_reading, the_watch_read_takes_in_a_pipelined_request) {
  auto r = reading();
  r.watch_started();
  EXPECT_EQ(r.watch_ended(watch_result::data, {false, 100, false, true, false}).what, watch_action::watch_again);
  r.watch_started();
  EXPECT_EQ(r.watch_ended(watch_result::data, {false, 100, true, false, false}).what, watch_action::idle)
      << "the answer is on its way; its write reads on";
  r.watch_started();
  ASSERT_TRUE(r.next_request_waits());
  EXPECT_EQ(r.watch_ended(watch_result::data, {false, 100, true, false, false}).what, watch_action::read_next);
  r.watch_started();
  EXPECT_EQ(r.watch_ended(watch_result::data, {false, max_body + 1, false, true, false}).what, watch_action::close)
      << "more than a body may hold";
}

TEST(request_reading, a_closed_session_lingers_whatever_the_watch_read_brought) {
  for (auto result : {watch_result::data, watch_result::aborted, watch_result::eof, watch_result::failed}) {
    auto r = reading();
    r.watch_started();
    request_reading::watch_facts f;
    f.closed = true;
    EXPECT_EQ(r.watch_ended(result, f).what, watch_action::linger);
    EXPECT_FALSE(r.peer_closed());
  }
}

TEST(request_reading, a_reset_closes) {
  auto r = reading();
  r.watch_started();
  const auto s = r.watch_ended(watch_result::failed, {false, 0, false, true, false});
  EXPECT_EQ(s.what, watch_action::close);
  EXPECT_FALSE(s.hold);
}

TEST(request_reading, a_half_closed_client_is_still_answered) {
  // Another wait (embeddings, a reload) still to answer: held, nothing else to do.
  auto other = reading();
  other.watch_started();
  auto s = other.watch_ended(watch_result::eof, {false, 0, false, false, false});
  EXPECT_EQ(s.what, watch_action::idle);
  EXPECT_TRUE(s.hold);
  EXPECT_TRUE(other.peer_closed());
  // A completion still running, streamed or whole: held and probed (a client that left is told
  // from one that half-closed by the reset that answers a write).
  auto running = reading();
  running.watch_started();
  s = running.watch_ended(watch_result::eof, {false, 0, false, true, false});
  EXPECT_EQ(s.what, watch_action::probe);
  EXPECT_TRUE(s.hold);
  EXPECT_TRUE(running.peer_closed());
  // Ended, its last bytes being written: held until they are out.
  auto writing = reading();
  writing.watch_started();
  s = writing.watch_ended(watch_result::eof, {false, 0, true, true, true});
  EXPECT_EQ(s.what, watch_action::idle);
  EXPECT_TRUE(s.hold);
  // Ended and written: nothing holds the session.
  auto done = reading();
  done.watch_started();
  s = done.watch_ended(watch_result::eof, {false, 0, true, false, false});
  EXPECT_EQ(s.what, watch_action::idle);
  EXPECT_FALSE(s.hold);
  // The next request was waiting: it is read (the half-close then answers or closes it).
  auto next = reading();
  next.watch_started();
  ASSERT_TRUE(next.next_request_waits());
  s = next.watch_ended(watch_result::eof, {false, 0, true, false, false});
  EXPECT_EQ(s.what, watch_action::reset_and_read);
  EXPECT_EQ(next.begin("").what, start_action::close);
}

TEST(request_reading, the_probe_sends_the_head_then_fillers_until_the_end) {
  EXPECT_EQ(request_reading::probe(false, false, false, false), probe_action::open_stream);
  EXPECT_EQ(request_reading::probe(false, false, false, true), probe_action::comment);
  EXPECT_EQ(request_reading::probe(true, false, false, true), probe_action::stop) << "closed";
  EXPECT_EQ(request_reading::probe(false, true, false, true), probe_action::stop) << "finishing";
  EXPECT_EQ(request_reading::probe(false, false, true, true), probe_action::stop) << "ended";
}

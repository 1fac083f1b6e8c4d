// net/request_guard: Host, Origin, Transfer-Encoding and Content-Type checks before routing.
#include <gtest/gtest.h>

#include "net/request_guard.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {
request_guard guard(std::string listen, std::vector<std::string> hosts = {}, std::vector<std::string> origins = {}) {
  return request_guard({std::move(listen), std::move(hosts), std::move(origins)});
}
}  // namespace

TEST(request_guard, host_names_default_to_the_listen_address_and_localhost) {
  auto g = guard("127.0.0.1");
  for (const char* h : {"127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:8080", "127.0.0.1"})
    EXPECT_FALSE(g.check_host(h, true, 11)) << h;
  auto e = g.check_host("evil.example:8080", true, 11);  // DNS rebinding: a foreign name on our address
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 421);
  EXPECT_EQ(e->param, "Host");
  EXPECT_NE(e->message.find("evil.example"), std::string::npos);
  EXPECT_NE(e->message.find("server.allowed_hosts"), std::string::npos);
  auto missing = g.check_host("", false, 11);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400);
  EXPECT_EQ(missing->param, "Host");
  EXPECT_FALSE(g.check_host("", false, 10)) << "HTTP/1.0 has no Host";
  EXPECT_FALSE(guard("10.1.2.3").check_host("10.1.2.3:80", true, 11));
  EXPECT_TRUE(guard("10.1.2.3").check_host("10.1.2.4:80", true, 11));
  EXPECT_FALSE(guard("::1").check_host("[::1]:80", true, 11));
}

TEST(request_guard, a_wildcard_listen_address_takes_any_host_unless_names_are_listed) {
  EXPECT_FALSE(guard("0.0.0.0").check_host("anything.example", true, 11));
  EXPECT_FALSE(guard("::").check_host("anything.example", true, 11));
  auto listed = guard("0.0.0.0", {"api.example.com"});
  EXPECT_FALSE(listed.check_host("API.example.com:443", true, 11));
  ASSERT_TRUE(listed.check_host("localhost", true, 11)) << "a list replaces the defaults";
  EXPECT_EQ(listed.check_host("other.example", true, 11)->status, 421);
  EXPECT_FALSE(guard("127.0.0.1", {"*"}).check_host("x", true, 11));
}

TEST(request_guard, origins_default_to_the_own_origin_and_localhost) {
  auto g = guard("127.0.0.1");
  EXPECT_FALSE(g.check_origin("", "127.0.0.1:8080")) << "no Origin: not a browser page";
  EXPECT_FALSE(g.check_origin("http://127.0.0.1:8080", "127.0.0.1:8080"));
  EXPECT_FALSE(g.check_origin("http://localhost:3000", "127.0.0.1:8080"));
  EXPECT_FALSE(g.check_origin("https://[::1]", "127.0.0.1:8080"));
  EXPECT_FALSE(guard("0.0.0.0").check_origin("http://box.lan:8080", "box.lan:8080")) << "its own page";
  for (const char* o : {"null", "file://", "https://evil.example", "http://localhost.evil.example",
                        "http://127.0.0.1.evil.example:8080"}) {
    auto e = g.check_origin(o, "127.0.0.1:8080");
    ASSERT_TRUE(e) << o;
    EXPECT_EQ(e->status, 403);
    EXPECT_EQ(e->param, "Origin");
    EXPECT_NE(e->message.find("server.allowed_origins"), std::string::npos);
  }
  auto listed = guard("127.0.0.1", {}, {"https://app.example.com"});
  EXPECT_FALSE(listed.check_origin("https://app.example.com", "127.0.0.1"));
  EXPECT_TRUE(listed.check_origin("http://localhost:3000", "127.0.0.1")) << "a list replaces the defaults";
  EXPECT_FALSE(guard("127.0.0.1", {}, {"*"}).check_origin("null", "127.0.0.1"));
}

TEST(request_guard, only_chunked_transfer_encoding_is_read) {
  EXPECT_FALSE(request_guard::check_transfer_encoding(""));
  EXPECT_FALSE(request_guard::check_transfer_encoding("chunked"));
  EXPECT_FALSE(request_guard::check_transfer_encoding(" Chunked "));
  for (const char* te : {"gzip", "chunked, gzip", "gzip, chunked", "identity", "chunked, chunked"}) {
    auto e = request_guard::check_transfer_encoding(te);
    ASSERT_TRUE(e) << te;
    EXPECT_EQ(e->status, 501);
    EXPECT_EQ(e->param, "Transfer-Encoding");
  }
}

TEST(request_guard, json_endpoints_need_a_json_content_type) {
  EXPECT_FALSE(request_guard::check_json_content_type("application/json"));
  EXPECT_FALSE(request_guard::check_json_content_type("Application/JSON; charset=utf-8"));
  for (const char* ct : {"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                         "application/jsonx"}) {
    auto e = request_guard::check_json_content_type(ct);
    ASSERT_TRUE(e) << ct;
    EXPECT_EQ(e->status, 415);
    EXPECT_EQ(e->param, "Content-Type");
  }
}

TEST(request_guard, a_json_body_in_another_charset_is_refused) {
  EXPECT_FALSE(request_guard::check_json_content_type("application/json; charset=\"UTF-8\""));
  EXPECT_FALSE(request_guard::check_json_content_type("application/json;charset=utf8; foo=bar"));
  for (const char* ct : {"application/json; charset=latin1", "application/json; foo=1; charset=\"utf-16\""}) {
    auto e = request_guard::check_json_content_type(ct);
    ASSERT_TRUE(e) << ct;
    EXPECT_EQ(e->status, 415);
    EXPECT_NE(e->message.find("charset"), std::string::npos) << e->message;
  }
}

TEST(request_guard, a_header_that_is_checked_comes_once) {
  EXPECT_FALSE(request_guard::check_once("Host", 0));
  EXPECT_FALSE(request_guard::check_once("Host", 1));
  auto e = request_guard::check_once("Host", 2);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "Host");
  EXPECT_NE(e->message.find("2 'Host' header lines"), std::string::npos) << e->message;
}

TEST(request_guard, a_malformed_host_is_refused) {
  auto g = guard("127.0.0.1");
  for (const char* h : {"127.0.0.1:", "127.0.0.1:65535", "[::1]", "localhost:8080"}) EXPECT_FALSE(g.check_host(h, true, 11)) << h;
  for (const char* h : {"127.0.0.1:99999x", "127.0.0.1:65536", "127.0.0.1:123456", "[::1", "[::1]x", "  "}) {
    auto e = g.check_host(h, true, 11);
    ASSERT_TRUE(e) << h;
    EXPECT_EQ(e->status, 400) << h;
    EXPECT_EQ(e->param, "Host");
  }
}

TEST(request_guard, a_json_body_needs_its_length) {
  EXPECT_FALSE(request_guard::check_body_framed(true, false));
  EXPECT_FALSE(request_guard::check_body_framed(false, true));
  auto e = request_guard::check_body_framed(false, false);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 411);
  EXPECT_EQ(e->param, "Content-Length");
}

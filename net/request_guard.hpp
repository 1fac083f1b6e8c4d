#pragma once
// What an HTTP request must pass before it is routed, free of sockets so that tests drive it
// directly: the `Host` it names (DNS-rebinding defence), the `Origin` of the page that sent it
// (cross-site requests and WebSocket hijacking), its `Transfer-Encoding` (only a final `chunked`
// is understood: anything else would be read as an empty body and the body's bytes as the next
// request, RFC 9112 6.1 / 6.3), and a JSON body's `Content-Type` (a page may post text/plain or a
// form to any site without a CORS preflight; it cannot post application/json). Each refusal is an
// api_error naming the header.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/api_error.hpp"

namespace troupe::net {

struct request_guard_options {
  std::string listen_host;                   // server.host, as configured (an IP address)
  std::vector<std::string> allowed_hosts;    // server.allowed_hosts
  std::vector<std::string> allowed_origins;  // server.allowed_origins
};

class request_guard {
 public:
  explicit request_guard(request_guard_options o);

  // `name`: a header that a request may have once (Host, Origin, Content-Type, Authorization);
  // `lines`: how many lines of it the request had. More than one is 400 (RFC 9112 3.2 for Host):
  // a check of the first must not be bypassed by a second that something else reads.
  static std::optional<api_error> check_once(std::string_view name, size_t lines);
  // `host`: the Host header's value ("name[:port]", "[v6]:port"); `present`: whether the request
  // had one. HTTP/1.1 requires it (RFC 9112 3.2): missing or with a port that is not a number
  // up to 65535 is 400; a name not allowed is 421.
  std::optional<api_error> check_host(std::string_view host, bool present, unsigned http_version) const;
  // `origin`: the Origin header's value (empty: none, always allowed); `host`: the request's Host
  // (its own origin is allowed by default). 403 naming Origin.
  std::optional<api_error> check_origin(std::string_view origin, std::string_view host) const;
  bool origin_allowed(std::string_view origin, std::string_view host) const;
  // `te`: the Transfer-Encoding header (empty: none). 501 for anything but exactly `chunked`.
  static std::optional<api_error> check_transfer_encoding(std::string_view te);
  // A JSON endpoint's request without Content-Length or Transfer-Encoding: its body would be read
  // as empty and its bytes as the next request (RFC 9112 6.3). 411 naming both headers.
  static std::optional<api_error> check_body_framed(bool content_length, bool transfer_encoding);
  // `content_type`: the Content-Type header. 415 unless it is application/json, with parameters
  // allowed except a charset other than UTF-8 (JSON's only encoding, RFC 8259 8.1; a body sent
  // in another would be read wrong).
  static std::optional<api_error> check_json_content_type(std::string_view content_type);

 private:
  request_guard_options o_;
  bool any_host_ = false;
};

// The host part of a Host header ("example.com:8080" -> "example.com", "[::1]:80" -> "[::1]"),
// lower-cased.
std::string host_name_of(std::string_view host);

}  // namespace troupe::net

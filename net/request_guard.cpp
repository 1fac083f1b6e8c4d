#include "net/request_guard.hpp"

#include <algorithm>
#include <cctype>

namespace troupe::net {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_loopback_name(std::string_view name) {
  return name == "localhost" || name == "127.0.0.1" || name == "[::1]";
}

bool contains(const std::vector<std::string>& v, std::string_view x) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& e) { return lower(e) == x; });
}

api_error refused(int status, std::string message, std::string param, std::string code) {
  api_error e = bad_request(std::move(message), std::move(param), std::move(code));
  e.status = status;
  return e;
}

}  // namespace

std::string host_name_of(std::string_view host) {
  host = trim(host);
  if (!host.empty() && host.front() == '[') {
    const auto close = host.find(']');
    return lower(close == std::string_view::npos ? host : host.substr(0, close + 1));
  }
  const auto colon = host.find(':');
  return lower(colon == std::string_view::npos ? host : host.substr(0, colon));
}

request_guard::request_guard(request_guard_options o) : o_(std::move(o)) {
  // Listening on every address, the names clients use cannot be known: any, unless listed.
  const bool wildcard = o_.listen_host == "0.0.0.0" || o_.listen_host == "::" || o_.listen_host == "[::]";
  any_host_ = contains(o_.allowed_hosts, "*") || (wildcard && o_.allowed_hosts.empty());
}

std::optional<api_error> request_guard::check_once(std::string_view name, size_t lines) {
  if (lines <= 1) return std::nullopt;
  return refused(400,
                 "the request has " + std::to_string(lines) + " '" + std::string(name) +
                     "' header lines; send one",
                 std::string(name), "duplicate_header");
}

std::optional<api_error> request_guard::check_host(std::string_view host, bool present, unsigned http_version) const {
  if (!present) {
    if (http_version < 11) return std::nullopt;  // HTTP/1.0 had no Host
    return refused(400, "the request has no Host header (HTTP/1.1 requires one)", "Host", "missing_host");
  }
  {
    const std::string_view h = trim(host);
    const auto close = h.empty() || h.front() != '[' ? std::string_view::npos : h.find(']');
    const auto colon = h.find(':', close == std::string_view::npos ? 0 : close);
    std::string_view port = colon == std::string_view::npos ? std::string_view() : h.substr(colon + 1);
    const bool bad_v6 = !h.empty() && h.front() == '[' && (close == std::string_view::npos ||
                                                            (close + 1 < h.size() && h[close + 1] != ':'));
    const bool bad_port =
        colon != std::string_view::npos &&
        (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
         (!port.empty() && std::stoul(std::string(port)) > 65535));
    if (h.empty() || bad_v6 || bad_port)
      return refused(400, "the Host header '" + std::string(host.substr(0, 256)) + "' is malformed (name[:port])",
                     "Host", "bad_host");
  }
  if (any_host_) return std::nullopt;
  const std::string name = host_name_of(host);
  if (o_.allowed_hosts.empty()) {
    const std::string listen = lower(o_.listen_host.find(':') != std::string::npos && o_.listen_host.front() != '['
                                         ? "[" + o_.listen_host + "]"
                                         : o_.listen_host);
    if (is_loopback_name(name) || name == listen) return std::nullopt;
  } else if (contains(o_.allowed_hosts, name)) {
    return std::nullopt;
  }
  return refused(421,
                 "the Host '" + std::string(host.substr(0, 256)) +
                     "' is not a name of this server; list the names clients use in server.allowed_hosts",
                 "Host", "misdirected_host");
}

bool request_guard::origin_allowed(std::string_view origin, std::string_view host) const {
  const std::string o = lower(trim(origin));
  if (o_.allowed_origins.empty()) {
    // The page this server serves (GET /) has the request's own Host as its origin.
    if (o == "http://" + lower(trim(host)) || o == "https://" + lower(trim(host))) return true;
    for (std::string_view scheme : {"http://", "https://"}) {
      if (o.compare(0, scheme.size(), scheme) != 0) continue;
      return is_loopback_name(host_name_of(std::string_view(o).substr(scheme.size())));
    }
    return false;
  }
  return contains(o_.allowed_origins, "*") || contains(o_.allowed_origins, o);
}

std::optional<api_error> request_guard::check_origin(std::string_view origin, std::string_view host) const {
  if (origin.empty() || origin_allowed(origin, host)) return std::nullopt;
  api_error e = refused(403,
                        "the Origin '" + std::string(origin.substr(0, 256)) +
                            "' may not use this server; add it to server.allowed_origins",
                        "Origin", "origin_not_allowed");
  e.type = "permission_error";
  return e;
}

std::optional<api_error> request_guard::check_transfer_encoding(std::string_view te) {
  te = trim(te);
  if (te.empty() || lower(te) == "chunked") return std::nullopt;
  api_error e = refused(501,
                        "Transfer-Encoding '" + std::string(te.substr(0, 64)) +
                            "' is not supported: send the body as is (Content-Length) or chunked",
                        "Transfer-Encoding", "unsupported_transfer_encoding");
  e.type = "invalid_request_error";
  return e;
}

std::optional<api_error> request_guard::check_body_framed(bool content_length, bool transfer_encoding) {
  if (content_length || transfer_encoding) return std::nullopt;
  return refused(411,
                 "the request's JSON body has no length: send Content-Length (or Transfer-Encoding: chunked) "
                 "with it",
                 "Content-Length", "length_required");
}

std::optional<api_error> request_guard::check_json_content_type(std::string_view content_type) {
  std::string_view media = content_type.substr(0, content_type.find(';'));
  if (lower(trim(media)) == "application/json") {
    // Parameters: name=value, separated by ';'; only charset matters.
    for (size_t at = content_type.find(';'); at != std::string_view::npos;) {
      const auto next = content_type.find(';', at + 1);
      const std::string_view param = trim(content_type.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
      at = next;
      const auto eq = param.find('=');
      if (eq == std::string_view::npos || lower(trim(param.substr(0, eq))) != "charset") continue;
      std::string_view v = trim(param.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      if (lower(v) == "utf-8" || lower(v) == "utf8") continue;
      return refused(415,
                     "the body must be JSON in UTF-8: Content-Type names charset '" + std::string(v.substr(0, 64)) + "'",
                     "Content-Type", "unsupported_media_type");
    }
    return std::nullopt;
  }
  return refused(415,
                 content_type.empty()
                     ? std::string("the body must be JSON: send 'Content-Type: application/json'")
                     : "the body must be JSON: Content-Type is '" + std::string(content_type.substr(0, 128)) +
                           "', expected 'application/json'",
                 "Content-Type", "unsupported_media_type");
}

}  // namespace troupe::net

#include "net/http_routes.hpp"

namespace troupe::net {

std::string strip_query(std::string_view target) {
  const auto q = target.find('?');
  return std::string(q == std::string_view::npos ? target : target.substr(0, q));
}

const char* allowed_methods(std::string_view path) {
  if (path == "/v1/ws") return "GET";
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/embeddings" || path == "/tokenize" ||
      path == "/detokenize" || path == "/admin/reload" || path == "/v1/responses")
    return "POST";
  if (path.rfind("/v1/responses/", 0) == 0) {
    constexpr std::string_view items = "/input_items";  // a stored response's input, read only
    const bool listing = path.size() > items.size() && path.substr(path.size() - items.size()) == items;
    return listing ? "GET, HEAD" : "GET, HEAD, DELETE";
  }
  if (path == "/health" || path == "/metrics" || path == "/" || path == "/index.html" || path == "/v1/models" ||
      path.rfind("/v1/models/", 0) == 0 || path == "/admin/config")
    return "GET, HEAD";
  return nullptr;
}

const char* json_endpoint(std::string_view path) {
  if (path == "/v1/chat/completions") return "chat_completions";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/embeddings") return "embeddings";
  if (path == "/v1/responses") return "responses";
  if (path == "/tokenize") return "tokenize";
  if (path == "/detokenize") return "detokenize";
  return nullptr;
}

const char* endpoint_of(std::string_view path) {
  if (const char* ep = json_endpoint(path)) return ep;
  if (path == "/v1/ws") return "ws";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  if (path == "/admin/reload") return "admin_reload";
  if (path == "/admin/config") return "admin_config";
  if (path == "/" || path == "/index.html") return "page";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) return "models";
  if (path.rfind("/v1/responses/", 0) == 0) return "responses";
  return "other";
}

// By hand: Beast does not decode targets and Boost.URL is not among the build's dependencies.
std::string percent_decoded(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> query_params(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    out.emplace_back(percent_decoded(pair.substr(0, eq)),
                     eq == std::string_view::npos ? std::string() : percent_decoded(pair.substr(eq + 1)));
  }
  return out;
}

}  // namespace troupe::net

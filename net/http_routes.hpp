#pragma once
// The HTTP server's paths, as plain functions of the request target (no Beast): which exist, the
// methods each takes, the name its requests count under in the metrics, which take a JSON body.
// The session (http_session.cpp) routes by them and refuses by them before a body is read.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::net {

// The target without its query ("/v1/models?x=1" -> "/v1/models").
std::string strip_query(std::string_view target);

// The methods a path answers, as a 405's Allow says them (HEAD is GET without the body): "GET",
// "POST", "GET, HEAD" or "GET, HEAD, DELETE" (a stored response); null for a path that is no endpoint.
const char* allowed_methods(std::string_view path);

// The endpoints whose body is JSON, by their name in the metrics (null for any other path): a page
// of another site can post text/plain or a form to any server without asking first (no CORS
// preflight), but not application/json; requiring it keeps such posts out.
const char* json_endpoint(std::string_view path);

// The name a path's requests count under in the metrics (`endpoint` of troupe_requests_total),
// "other" for a path that is no endpoint.
const char* endpoint_of(std::string_view path);

// A path segment with its %XX escapes decoded (a malformed escape is kept as it is).
std::string percent_decoded(std::string_view s);

// A query string's parameters ("a=1&b%5B%5D=x" -> a: 1, b[]: x), in order, names and values
// decoded; a parameter without '=' has the value ""; empty ones ("a=1&&b=2") are left out.
std::vector<std::pair<std::string, std::string>> query_params(std::string_view query);

}  // namespace troupe::net

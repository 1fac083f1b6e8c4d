#pragma once
// A request the API refuses, as both wire protocols report it: the HTTP status it maps to,
// OpenAI's error type, a machine-readable code and a message that names the offending field.
// openai_codec writes it as an OpenAI error body; ws_protocol as an error frame.
#include <string>
#include <utility>

namespace troupe::net {

struct api_error {
  int status = 400;
  std::string type = "invalid_request_error";  // OpenAI's error.type
  std::string code;                            // machine-readable (errc names and a few of ours)
  std::string message;
  std::string param;                           // the offending field, when there is one
  // Sent as `x-should-retry: false` (HTTP), the header OpenAI's SDKs read before retrying a 5xx:
  // for an error a retry of the same request cannot cure (its own deadline passed).
  bool no_retry = false;
};

inline api_error bad_request(std::string message, std::string param = {}, std::string code = "invalid_request") {
  api_error e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

}  // namespace troupe::net

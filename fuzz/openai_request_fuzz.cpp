// Fuzzes the OpenAI request decoder (net/openai_codec.cpp parse_openai_request) with arbitrary
// bodies, read as both /v1/chat/completions and /v1/completions. Invariants: no crash; a refusal
// is a 4xx naming a problem, and its error body (error_json) is valid JSON carrying that message;
// an accepted chat body has messages, and no accepted request has a negative max_tokens.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_json.hpp"
#include "net/openai_codec.hpp"

using namespace troupe;

namespace {

void check_refusal(simdjson::dom::parser& p, const net::api_error& e) {
  FUZZ_CHECK(e.status >= 400 && e.status < 500);
  FUZZ_CHECK(!e.message.empty());
  auto obj = fuzz::must_be_object(p, net::error_json(e));
  simdjson::dom::object err;
  FUZZ_CHECK(!obj["error"].get(err));
  std::string_view msg;
  FUZZ_CHECK(!err["message"].get(msg));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  simdjson::dom::parser p;
  for (const bool chat : {true, false}) {
    const auto r = net::parse_openai_request(body, chat);
    if (!r.request) {
      check_refusal(p, r.error);
      continue;
    }
    const auto& s = r.request->spec;
    if (chat) FUZZ_CHECK(!s.messages.empty());
    FUZZ_CHECK(s.max_tokens >= 0);
  }
  return 0;
}

// Fuzzes the WebSocket protocol's client frames (net/ws_protocol.cpp parse_client_frame): the
// text of any message a client sends on /v1/ws. Invariants: no crash; a refusal names a
// problem and the error frame written for it is valid JSON echoing the frame's id; an accepted
// frame's id, echoed in token, done and error frames, comes back as written; `resume` has a
// from_index of -1 or more and a key.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_json.hpp"
#include "net/ws_protocol.hpp"

using namespace troupe;

namespace {

void check_echo(simdjson::dom::parser& p, const std::string& frame, const std::string& id) {
  auto obj = fuzz::must_be_object(p, frame);
  std::string_view got;
  if (id.empty()) return;  // frames without an id may leave it out
  FUZZ_CHECK(!obj["id"].get(got));
  // The writer replaces invalid UTF-8 with U+FFFD; a valid id comes back byte for byte.
  if (fuzz::valid_utf8(id)) FUZZ_CHECK(got == id);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  simdjson::dom::parser p;
  const auto f = net::parse_client_frame(text);
  if (!f.frame) {
    FUZZ_CHECK(!f.error.message.empty());
    check_echo(p, net::error_frame(f.id, f.error), f.id);  // with its param
    return 0;
  }
  const auto& c = *f.frame;
  if (c.type == net::frame_type::resume) FUZZ_CHECK(c.from_index >= -1 && !c.resume_key.empty());
  if (c.type == net::frame_type::generate) FUZZ_CHECK(!c.id.empty() && c.spec.max_tokens >= 0);
  check_echo(p, net::token_frame(c.id, 0, "x"), c.id);
  actors::done_event d;
  d.finish_reason = "stop";
  check_echo(p, net::done_frame(c.id, d), c.id);
  fuzz::must_be_object(p, net::pong_frame());
  return 0;
}

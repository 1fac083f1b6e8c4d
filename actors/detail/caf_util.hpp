#pragma once
// Small helpers shared by the actor shells.
#include <chrono>
#include <string>

#include <caf/error.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace troupe::actors::detail {

// The text a person needs from a CAF error: its context string when it has one
// (make_error(sec::..., "text")), else CAF's rendering.
inline std::string describe(const caf::error& e) {
  if (!e) return "no error";
  const auto& ctx = e.context();
  if (ctx.size() > 0 && ctx.match_element<std::string>(ctx.size() - 1))
    return ctx.get_as<std::string>(ctx.size() - 1);
  if (e.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(e.code())) {
      case caf::sec::request_timeout:
        return "request timed out";
      case caf::sec::request_receiver_down:
        return "the actor asked is gone";
      default:
        break;
    }
  }
  return caf::to_string(e);
}

inline std::chrono::milliseconds ms(int64_t n) { return std::chrono::milliseconds(n); }

}  // namespace troupe::actors::detail

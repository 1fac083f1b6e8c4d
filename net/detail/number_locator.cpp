#include "net/detail/number_locator.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace troupe::net::detail {

bool number_in_range(std::string_view t) {
  const bool integer = t.find_first_of(".eE") == std::string_view::npos;
  if (integer) {
    if (t.front() == '-') {
      int64_t v;
      return std::from_chars(t.data(), t.data() + t.size(), v).ec == std::errc{};
    }
    uint64_t v;
    return std::from_chars(t.data(), t.data() + t.size(), v).ec == std::errc{};
  }
  const std::string copy(t);
  errno = 0;
  const double v = std::strtod(copy.c_str(), nullptr);
  return !(errno == ERANGE && std::isinf(v));  // underflow reads as 0, as simdjson reads it
}

std::string locate_bad_number(std::string_view body) {
  struct level {
    bool object;
    std::string key;  // object: the current member's key
    size_t index = 0; // array: the current element
  };
  std::vector<level> stack;
  auto path = [&] {
    std::string p;
    for (const auto& l : stack) {
      if (l.object) p += (p.empty() ? "" : ".") + l.key;
      else p += "[" + std::to_string(l.index) + "]";
    }
    return p;
  };
  bool expect_key = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < body.size() && body[j] != '"') j += body[j] == '\\' ? 2 : 1;
      if (expect_key && !stack.empty()) stack.back().key = std::string(body.substr(i + 1, j - i - 1));
      expect_key = false;
      i = j;
    } else if (c == '{') {
      stack.push_back({true, {}});
      expect_key = true;
    } else if (c == '[') {
      stack.push_back({false, {}});
    } else if (c == '}' || c == ']') {
      if (!stack.empty()) stack.pop_back();
    } else if (c == ',') {
      if (!stack.empty() && stack.back().object) expect_key = true;
      else if (!stack.empty()) ++stack.back().index;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i + 1;
      // strchr finds the terminating NUL too: a NUL byte in the body is no part of a number.
      while (j < body.size() && std::strchr("0123456789.eE+-", body[j]) && body[j] != '\0') ++j;
      if (!number_in_range(body.substr(i, j - i))) return path();
      i = j - 1;
    }
  }
  return {};
}

}  // namespace troupe::net::detail

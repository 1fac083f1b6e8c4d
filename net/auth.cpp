#include "net/auth.hpp"

#include <cctype>

namespace troupe::net {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Length differences still cost a full pass over `a`, so timing reveals little but the length.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (static_cast<unsigned char>(a[i]) ^ y));
  }
  return diff == 0;
}

std::string_view bearer_key(std::string_view h) {
  constexpr std::string_view scheme = "bearer ";
  if (h.size() <= scheme.size()) return {};
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != scheme[i]) return {};
  h.remove_prefix(scheme.size());
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && (h.back() == ' ' || h.back() == '\r')) h.remove_suffix(1);
  return h;
}

int find_key(const std::vector<std::string>& keys, std::string_view presented) {
  if (keys.empty()) return 0;
  int found = -1;
  for (size_t i = 0; i < keys.size(); ++i)  // no early exit: every key is compared
    if (constant_time_equal(keys[i], presented) && found < 0) found = static_cast<int>(i);
  return found;
}

}  // namespace troupe::net

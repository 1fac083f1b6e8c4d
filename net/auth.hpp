#pragma once
// API keys: `Authorization: Bearer <key>` checked against the configured keys in constant time
// (the comparison does not stop at the first differing byte, nor at a matching key).
#include <string>
#include <string_view>
#include <vector>

namespace troupe::net {

bool constant_time_equal(std::string_view a, std::string_view b);

// The key of an `Authorization` header value ("Bearer <key>"), or empty.
std::string_view bearer_key(std::string_view header);

// The index of `presented` among `keys`, or -1. With no keys configured, everything is allowed (0).
int find_key(const std::vector<std::string>& keys, std::string_view presented);

}  // namespace troupe::net

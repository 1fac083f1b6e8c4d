#pragma once
// What a fuzz target asserts: a broken invariant prints what broke and aborts, which libFuzzer
// reports as a crash (saving the input) and the corpus replay (replay_main.cpp) as a failed test.
// Not gtest: a fuzz target runs millions of inputs, with no test framework around it.
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace troupe::fuzz {

[[noreturn]] inline void broken(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", file, line, what);
  std::abort();
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
// Written here rather than taken from a library so the check shares no code with the UTF-8
// handling it checks (model/detail/tokenizer_utf8.hpp).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned c = p[i];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) { ++i; continue; }
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) { n = 2; lo = 0xA0; }
    else if (c == 0xED) { n = 2; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) n = 2;
    else if (c == 0xF0) { n = 3; lo = 0x90; }
    else if (c == 0xF4) { n = 3; hi = 0x8F; }
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else return false;
    if (i + n >= s.size()) return false;  // truncated sequence
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k <= n; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace troupe::fuzz

#define FUZZ_CHECK(cond)                                              \
  do {                                                                \
    if (!(cond)) ::troupe::fuzz::broken(#cond, __FILE__, __LINE__);   \
  } while (0)

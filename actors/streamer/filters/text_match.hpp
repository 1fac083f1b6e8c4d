#pragma once
// Byte-level text matching shared by the built-in filters: ASCII case folding (other bytes
// compare as they are) and what counts as part of a word (letters, digits, '_' and any byte of
// a multi-byte UTF-8 character, so accented words stay whole).
#include <cstddef>
#include <string>

namespace troupe::actors::filters {

inline unsigned char fold(unsigned char c, bool case_sensitive) {
  return !case_sensitive && c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c - 'A' + 'a') : c;
}

// Whether text[at, at+n) equals the first n bytes of `word`.
inline bool same(const std::string& text, size_t at, const std::string& word, size_t n, bool case_sensitive) {
  for (size_t k = 0; k < n; ++k)
    if (fold(static_cast<unsigned char>(text[at + k]), case_sensitive) !=
        fold(static_cast<unsigned char>(word[k]), case_sensitive))
      return false;
  return true;
}

inline bool word_byte(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace troupe::actors::filters

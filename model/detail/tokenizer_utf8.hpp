#pragma once
// UTF-8 helpers shared by the tokenizer, the pre-tokenizer and the detokenizer, and GPT-2's
// byte-level alphabet. Header-only: the engine library globs only model/*.cpp.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::model::detail {

// The length a lead byte announces, read the lenient way llama.cpp splits SentencePiece and BPE
// symbols (continuation and invalid bytes count as one), so symbol boundaries match its output.
inline size_t utf8_lead_len(unsigned char c) {
  static constexpr uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lut[c >> 4];
}

enum class utf8_status { complete, incomplete, invalid };

// What the bytes at p[0..n) start with. `len` is the sequence length when complete, the bytes
// seen so far when incomplete (more may come), and the maximal ill-formed subpart (>= 1) when
// invalid, per the Unicode standard's table 3-7 (no overlongs, surrogates or > U+10FFFF).
struct utf8_scan {
  utf8_status status;
  size_t len;
};

inline utf8_scan scan_utf8(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return {utf8_status::complete, 1};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {utf8_status::invalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {utf8_status::incomplete, i};
    const unsigned char b = p[i];
    const unsigned char l = i == 1 ? lo : 0x80;
    const unsigned char h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {utf8_status::invalid, i};
  }
  return {utf8_status::complete, need};
}

// Offset of the first byte that does not start a complete, valid sequence; npos when valid.
inline size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const auto r = scan_utf8(p + i, s.size() - i);
    if (r.status != utf8_status::complete) return i;
    i += r.len;
  }
  return std::string_view::npos;
}

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

inline constexpr std::string_view k_replacement_char = "\xEF\xBF\xBD";  // U+FFFD

// Replaces every byte that does not begin a valid sequence with U+FFFD, one per byte: the same
// repair llama.cpp applies before its regex split, so ill-formed input tokenizes alike.
inline std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const auto r = scan_utf8(p + i, s.size() - i);
    if (r.status == utf8_status::complete) {
      out.append(s.data() + i, r.len);
      i += r.len;
    } else {
      out += k_replacement_char;
      i += 1;
    }
  }
  return out;
}

// GPT-2's byte-level alphabet: every byte gets a printable code point, so a byte-level BPE
// vocabulary can spell any byte string. Printable Latin-1 bytes stand for themselves; the rest
// take U+0100 upwards in byte order.
struct byte_level_alphabet {
  std::array<std::string, 256> encode;   // byte -> UTF-8 of its code point
  std::array<int16_t, 0x144> decode{};   // code point -> byte, -1 when not in the alphabet

  byte_level_alphabet() {
    decode.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(encode[b], cp);
      decode[cp] = static_cast<int16_t>(b);
    }
  }

  static const byte_level_alphabet& get() {
    static const byte_level_alphabet a;
    return a;
  }
};

}  // namespace troupe::model::detail

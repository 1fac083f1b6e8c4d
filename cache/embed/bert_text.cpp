#include "cache/embed/bert_text.hpp"

#include <algorithm>
#include <cstdint>

#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::cache {

namespace {

struct code_range {
  uint32_t lo, hi;
};
struct code_fold {
  uint32_t cp;
  uint8_t n;
  uint32_t out[3];
};

#include "cache/embed/detail/bert_unicode_tables.inc"

template <size_t N>
bool in_ranges(const code_range (&table)[N], uint32_t cp) {
  auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                             [](uint32_t c, const code_range& r) { return c < r.lo; });
  return it != std::begin(table) && cp <= (it - 1)->hi;
}

const code_fold* find_fold(uint32_t cp) {
  auto it = std::lower_bound(std::begin(k_fold), std::end(k_fold), cp,
                             [](const code_fold& f, uint32_t c) { return f.cp < c; });
  return it != std::end(k_fold) && it->cp == cp ? &*it : nullptr;
}

// Rust's char::is_whitespace (the White_Space property), which the BERT normaliser uses.
bool is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// BERT's "Chinese character" blocks: CJK ideographs get a space on each side, so each is a word.
bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_utf8(std::string& s, uint32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Calls fn(code point) for each valid sequence of s; invalid bytes are skipped.
template <class Fn>
void for_each_code_point(std::string_view s, Fn&& fn) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    auto sc = model::detail::scan_utf8(p + i, s.size() - i);
    if (sc.status != model::detail::utf8_status::complete) {
      i += std::max<size_t>(1, sc.len);
      continue;
    }
    uint32_t c = p[i];
    if (sc.len == 2) c = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
    if (sc.len == 3) c = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
    if (sc.len == 4) c = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
    fn(c);
    i += sc.len;
  }
}

// Hangul syllables decompose (NFD) into two or three conjoining jamo, by arithmetic.
void decompose_hangul(uint32_t c, uint32_t out[3], int& n) {
  constexpr uint32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
  constexpr uint32_t v_count = 21, t_count = 28, n_count = v_count * t_count;
  const uint32_t s = c - s_base;
  out[0] = l_base + s / n_count;
  out[1] = v_base + (s % n_count) / t_count;
  n = 2;
  if (s % t_count != 0) out[n++] = t_base + s % t_count;
}

// One input code point to its normalised code points (none when dropped).
int normalize_code_point(uint32_t c, uint32_t out[3]) {
  if (c == 0 || c == 0xFFFD || in_ranges(k_other, c)) return 0;
  if (is_whitespace(c)) {
    out[0] = ' ';
    return 1;
  }
  if (in_ranges(k_nonspacing_mark, c)) return 0;
  if (c >= 0xAC00 && c <= 0xD7A3) {
    int n = 0;
    decompose_hangul(c, out, n);
    return n;
  }
  if (const code_fold* f = find_fold(c)) {
    std::copy(f->out, f->out + f->n, out);
    return f->n;
  }
  out[0] = c;
  return 1;
}

}  // namespace

std::string bert_normalize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&](uint32_t c) {
    if (is_cjk(c)) {
      out += ' ';
      append_utf8(out, c);
      out += ' ';
      return;
    }
    uint32_t buf[3];
    const int n = normalize_code_point(c, buf);
    for (int i = 0; i < n; ++i) append_utf8(out, buf[i]);
  });
  return out;
}

std::vector<std::string> bert_basic_split(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
  };
  for_each_code_point(text, [&](uint32_t c) {
    uint32_t buf[3];
    int n;
    if (is_cjk(c)) {
      buf[0] = c;
      n = 1;
      flush();
    } else {
      n = normalize_code_point(c, buf);
    }
    for (int i = 0; i < n; ++i) {
      const uint32_t d = buf[i];
      if (is_whitespace(d)) {
        flush();
      } else if (in_ranges(k_punctuation, d)) {
        flush();
        append_utf8(cur, d);
        flush();
      } else {
        append_utf8(cur, d);
      }
    }
    if (is_cjk(c)) flush();
  });
  flush();
  return words;
}

}  // namespace troupe::cache

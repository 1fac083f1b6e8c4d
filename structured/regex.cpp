#include "structured/regex.hpp"

#include <simdjson.h>

#include <cstdio>
#include <vector>

#include "model/detail/tokenizer_utf8.hpp"
#include "structured/gbnf.hpp"

namespace troupe::structured {

namespace {

constexpr uint32_t max_regex_repeat = 1000;
// Groups nested deeper than this are refused: the translator recurses per group, and a pattern
// of a few hundred KB of '(' (a request body can hold one) overflowed the stack (found by
// fuzzing). The grammar written for it nests up to twice as deep (gbnf.cpp allows 256).
constexpr size_t max_regex_group_depth = 100;

std::vector<code_range> digit_ranges() { return {{'0', '9'}}; }
std::vector<code_range> word_ranges() { return normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
std::vector<code_range> space_ranges() { return normalize_ranges({{'\t', '\r'}, {' ', ' '}}); }

class regex_translator {
 public:
  regex_translator(std::string_view p, bool json) : p_(p), json_(json) {}

  result<std::string> run() {
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    std::string out;
    if (auto st = parse_alt(out); !st) return make_error(st.error());
    if (pos_ < p_.size()) {
      if (p_[pos_] == ')') return make_error(err("unbalanced ')'"));
      return make_error(err("unexpected character"));
    }
    return out.empty() ? std::string("\"\"") : out;
  }

 private:
  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
  size_t group_depth_ = 0;

  std::string err(const std::string& what) const {
    return "regex: " + what + " at offset " + std::to_string(pos_) + " of the pattern";
  }
  status fail(const std::string& what) const { return make_error(err(what)); }

  // Alternatives, wrapped in ( ) when there is more than one.
  status parse_alt(std::string& out) {
    std::vector<std::string> alts;
    for (;;) {
      std::string seq;
      if (auto st = parse_seq(seq); !st) return st;
      alts.push_back(seq);
      if (pos_ < p_.size() && p_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (alts.size() == 1) {
      out = alts[0];
      return {};
    }
    out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    out += ")";
    return {};
  }

  status parse_seq(std::string& out) {
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      const size_t at = pos_;
      std::string atom;
      const char c = p_[pos_];
      if (c == '$') {
        if (pos_ + 1 == p_.size()) {
          ++pos_;
          continue;
        }
        return fail("anchor '$' is only supported at the end");
      }
      if (c == '^') return fail("anchor '^' is only supported at the start");
      if (c == '*' || c == '+' || c == '?') return fail(std::string("quantifier '") + c + "' with nothing to repeat");
      if (c == '(') {
        if (group_depth_ >= max_regex_group_depth)
          return fail("groups nested more than " + std::to_string(max_regex_group_depth) + " deep");
        ++pos_;
        if (p_.substr(pos_, 1) == "?") {
          const auto rest = p_.substr(pos_);
          if (rest.substr(0, 2) == "?:") {
            pos_ += 2;
          } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!") {
            return fail("lookahead is not supported");
          } else if (rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
            return fail("lookbehind is not supported");
          } else if (rest.substr(0, 3) == "?P<" || rest.substr(0, 2) == "?<") {
            const size_t close = p_.find('>', pos_);
            if (close == std::string_view::npos) return fail("unterminated group name");
            pos_ = close + 1;
          } else if (rest.substr(0, 3) == "?P=") {
            return fail("backreferences are not supported");
          } else {
            return fail("inline flags and other (? groups are not supported");
          }
        }
        std::string inner;
        ++group_depth_;
        if (auto st = parse_alt(inner); !st) return st;
        --group_depth_;
        if (pos_ >= p_.size() || p_[pos_] != ')') {
          pos_ = at;
          return fail("unbalanced '('");
        }
        ++pos_;
        atom = "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
      } else if (c == '[') {
        std::vector<code_range> set;
        if (auto st = parse_class(set); !st) return st;
        atom = emit_set(set);
        if (atom.empty()) return fail("character class matches no character a JSON string may hold");
      } else if (c == '.') {
        ++pos_;
        atom = emit_set(complement_ranges({{'\n', '\n'}}));
      } else if (c == '\\') {
        std::vector<code_range> set;
        bool is_set = false;
        uint32_t cp = 0;
        if (auto st = parse_escape(false, cp, set, is_set); !st) return st;
        atom = is_set ? emit_set(set) : emit_char(cp);
      } else {
        atom = emit_char(decode());
      }
      if (auto st = parse_quantifier(atom); !st) return st;
      if (!out.empty()) out += ' ';
      out += atom;
    }
    return {};
  }

  status parse_quantifier(std::string& atom) {
    if (pos_ >= p_.size()) return {};
    const char c = p_[pos_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      size_t p = pos_ + 1;
      auto num = [&](uint32_t& v) {
        const size_t b = p;
        uint64_t x = 0;
        while (p < p_.size() && p_[p] >= '0' && p_[p] <= '9') x = std::min<uint64_t>(x * 10 + static_cast<uint64_t>(p_[p++] - '0'), 1u << 30);
        v = static_cast<uint32_t>(x);
        return p > b;
      };
      uint32_t lo = 0, hi = 0;
      bool has_hi = true, comma = false;
      if (!num(lo)) return {};  // Python reads a '{' that starts no quantifier as itself
      if (p < p_.size() && p_[p] == ',') {
        comma = true;
        ++p;
        has_hi = num(hi);
      } else {
        hi = lo;
      }
      if (p >= p_.size() || p_[p] != '}') return {};
      if ((has_hi && hi < lo)) return fail("quantifier {m,n} with n < m");
      if (lo > max_regex_repeat || (has_hi && hi > max_regex_repeat))
        return fail("quantifier count above " + std::to_string(max_regex_repeat));
      pos_ = p + 1;
      q = "{" + std::to_string(lo) + (comma ? "," + (has_hi ? std::to_string(hi) : std::string()) : std::string()) + "}";
    } else {
      return {};
    }
    if (pos_ < p_.size() && p_[pos_] == '+') return fail("possessive quantifiers are not supported");
    if (pos_ < p_.size() && p_[pos_] == '?') ++pos_;  // lazy: the same strings
    if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || (p_[pos_] == '?'))) return fail("multiple repeat");
    // GBNF applies a postfix to the last item; a multi-character literal is wrapped.
    if (atom.size() > 1 && atom.front() == '"') atom = "(" + atom + ")";
    atom += q;
    return {};
  }

  uint32_t decode() { return decode_utf8_or_byte(p_, pos_); }

  status parse_hex(size_t n, uint32_t& cp) {
    cp = 0;
    for (size_t k = 0; k < n; ++k, ++pos_) {
      if (pos_ >= p_.size()) return fail("truncated hex escape");
      const char h = p_[pos_];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return fail("bad hex digit in escape");
      cp = cp * 16 + static_cast<uint32_t>(d);
    }
    return {};
  }

  // After '\': a single code point or (is_set) a set such as \d.
  status parse_escape(bool in_class, uint32_t& cp, std::vector<code_range>& set, bool& is_set) {
    ++pos_;
    if (pos_ >= p_.size()) return fail("pattern ends with '\\'");
    const char e = p_[pos_++];
    is_set = false;
    switch (e) {
      case 'd': is_set = true; set = digit_ranges(); return {};
      case 'w': is_set = true; set = word_ranges(); return {};
      case 's': is_set = true; set = space_ranges(); return {};
      case 'D': is_set = true; set = complement_ranges(digit_ranges()); return {};
      case 'W': is_set = true; set = complement_ranges(word_ranges()); return {};
      case 'S': is_set = true; set = complement_ranges(space_ranges()); return {};
      case 'n': cp = '\n'; return {};
      case 't': cp = '\t'; return {};
      case 'r': cp = '\r'; return {};
      case 'f': cp = '\f'; return {};
      case 'v': cp = '\v'; return {};
      case 'x': return parse_hex(2, cp);
      case 'u': return parse_hex(4, cp);
      case 'b':
        if (in_class) {
          cp = '\b';
          return {};
        }
        pos_ -= 2;
        return fail("word boundary '\\b' is not supported");
      case 'B': pos_ -= 2; return fail("word boundary '\\B' is not supported");
      case 'A': case 'Z': case 'z': pos_ -= 2; return fail(std::string("anchor '\\") + e + "' is not supported");
      case 'k': pos_ -= 2; return fail("backreferences are not supported");
      default:
        if (e >= '0' && e <= '9') {
          pos_ -= 2;
          return fail("backreferences are not supported");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          pos_ -= 2;
          return fail(std::string("unknown escape '\\") + e + "'");
        }
        --pos_;
        cp = decode();
        return {};
    }
  }

  status parse_class(std::vector<code_range>& set) {
    const size_t start = pos_;
    ++pos_;
    bool negated = false;
    if (pos_ < p_.size() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    bool first = true;
    while (pos_ < p_.size() && (p_[pos_] != ']' || first)) {
      first = false;
      uint32_t lo = 0;
      std::vector<code_range> sub;
      bool is_set = false;
      if (p_[pos_] == '\\') {
        if (auto st = parse_escape(true, lo, sub, is_set); !st) return st;
      } else if (p_.substr(pos_, 2) == "[:") {
        return fail("POSIX classes like [:alpha:] are not supported");
      } else {
        lo = decode();
      }
      if (is_set) {
        set.insert(set.end(), sub.begin(), sub.end());
        continue;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (p_[pos_] == '\\') {
          if (auto st = parse_escape(true, hi, sub, is_set); !st) return st;
          if (is_set) return fail("a class like \\d cannot end a range");
        } else {
          hi = decode();
        }
        if (hi < lo) return fail("reversed range in character class");
      }
      set.push_back({lo, hi});
    }
    if (pos_ >= p_.size()) {
      pos_ = start;
      return fail("unterminated character class");
    }
    ++pos_;
    set = normalize_ranges(std::move(set));
    if (negated) set = complement_ranges(set);
    if (set.empty()) return fail("character class matches nothing");
    return {};
  }

  // How code point cp appears inside a JSON string ("" when it is left out).
  static std::string json_escape(uint32_t cp) {
    switch (cp) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      default: return "";
    }
  }
  static bool json_special(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

  std::string emit_char(uint32_t cp) const {
    std::string s;
    if (json_ && json_special(cp)) {
      s = json_escape(cp);
      if (s.empty()) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04X", cp);
        s = buf;
      }
      return gbnf_literal(s);
    }
    return gbnf_literal(utf8(cp));
  }

  static std::string utf8(uint32_t cp) {
    std::string out;
    model::detail::append_utf8(out, cp);
    return out;
  }

  // A set of code points as one GBNF item; "" when nothing of it may appear.
  std::string emit_set(const std::vector<code_range>& set) const {
    if (!json_) return gbnf_class(set);
    // Inside a JSON string: the plain part as a class, the specials as their escapes.
    std::vector<code_range> plain;
    std::vector<std::string> escaped;
    for (const auto& r : set) {
      for (uint32_t cp = r.lo; cp <= r.hi && cp <= 0x5C; ++cp)
        if (json_special(cp) && !json_escape(cp).empty()) escaped.push_back(gbnf_literal(json_escape(cp)));
    }
    const auto specials = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    const auto allowed = complement_ranges(specials);
    // plain = set ∩ allowed
    for (const auto& a : set)
      for (const auto& b : allowed) {
        const uint32_t lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
        if (lo <= hi) plain.push_back({lo, hi});
      }
    std::vector<std::string> alts;
    if (!plain.empty()) alts.push_back(gbnf_class(normalize_ranges(plain)));
    alts.insert(alts.end(), escaped.begin(), escaped.end());
    if (alts.empty()) return "";
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }
};

}  // namespace

result<std::string> regex_to_gbnf(std::string_view pattern, bool json_string) {
  return regex_translator(pattern, json_string).run();
}

result<std::string> choice_to_gbnf(std::string_view json_array) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json_array);
  simdjson::dom::element doc;
  if (auto e = parser.parse(text).get(doc); e) return make_error(std::string("choice: not valid JSON: ") + simdjson::error_message(e));
  simdjson::dom::array arr;
  if (doc.get_array().get(arr)) return make_error("choice: expected a JSON array of strings");
  std::string out;
  size_t i = 0;
  for (auto v : arr) {
    std::string_view s;
    if (v.get_string().get(s)) return make_error("choice: element " + std::to_string(i) + " is not a string");
    if (!out.empty()) out += " | ";
    out += s.empty() ? std::string("\"\"") : gbnf_literal(s);
    ++i;
  }
  if (i == 0) return make_error("choice: the list is empty");
  return out;
}

}  // namespace troupe::structured

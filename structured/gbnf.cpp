#include "structured/gbnf.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::structured {

namespace {

// Repetition counts above this would expand into huge rule chains.
constexpr uint32_t max_repeat = 1000;
// Groups ( ) nested deeper than this are refused (the parser recurses per group). Twice
// regex.cpp's own bound and more: a regex group can become two nested grammar groups.
constexpr size_t max_gbnf_group_depth = 256;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}


class parser {
 public:
  explicit parser(std::string_view text) : s_(text) {}

  result<gbnf_grammar> run(std::string_view root_rule) {
    skip_space(true);
    while (pos_ < s_.size()) {
      if (auto st = parse_rule(); !st) return make_error(st.error());
      skip_space(true);
    }
    if (!error_.empty()) return make_error(error_);
    return finish(root_rule);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  size_t group_depth_ = 0;
  std::string error_;
  gbnf_grammar g_;
  std::unordered_map<std::string, uint32_t> index_;
  std::vector<bool> defined_;
  std::map<uint32_t, std::string> first_ref_;  // rule -> "line L column C" of its first use
  std::map<uint32_t, int> gen_count_;
  std::vector<uint32_t> repeats_;  // the `R ::= item R |` rules of X* X+ X{m,}

  std::string where(size_t p) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "line " + std::to_string(line) + " column " + std::to_string(col);
  }
  status fail(const std::string& what, size_t p) { return make_error("grammar: " + where(p) + ": " + what); }
  status fail(const std::string& what) { return fail(what, pos_); }
  std::string found() const {
    if (pos_ >= s_.size()) return "end of input";
    const char c = s_[pos_];
    if (c == '\n') return "end of line";
    return std::string("'") + c + "'";
  }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  // At top level a newline ends a rule unless the next non-blank line starts with `|`.
  void skip_space_continuation() {
    skip_space(false);
    size_t p = pos_;
    while (p < s_.size()) {
      const char c = s_[p];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++p;
      } else if (c == '#') {
        while (p < s_.size() && s_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    if (p < s_.size() && s_[p] == '|') pos_ = p;
  }

  uint32_t rule_id(const std::string& name) {
    auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    const auto id = static_cast<uint32_t>(g_.rules.size());
    g_.rules.push_back({name, {}});
    defined_.push_back(false);
    index_.emplace(name, id);
    return id;
  }
  uint32_t new_rule(uint32_t parent) {
    const std::string base = g_.rules[parent].name.substr(0, g_.rules[parent].name.find('#'));
    const uint32_t owner = index_.at(base);
    for (;;) {
      const std::string name = base + "#" + std::to_string(++gen_count_[owner]);
      if (index_.count(name)) continue;
      const auto id = rule_id(name);
      defined_[id] = true;
      return id;
    }
  }

  std::string parse_name() {
    const size_t b = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }

  status parse_rule() {
    const size_t at = pos_;
    const std::string name = parse_name();
    if (name.empty()) return fail("expected a rule name, found " + found());
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") return fail("expected '::=' after rule name '" + name + "', found " + found());
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name);
    if (defined_[id]) return fail("rule '" + name + "' is defined twice", at);
    defined_[id] = true;
    std::vector<gbnf_sequence> alts;
    if (auto st = parse_alternatives(id, false, alts); !st) return st;
    g_.rules[id].alts = std::move(alts);
    if (pos_ < s_.size() && s_[pos_] != '\n')
      return fail("expected end of line after rule '" + name + "', found " + found());
    return {};
  }

  status parse_alternatives(uint32_t rule, bool nested, std::vector<gbnf_sequence>& out) {
    for (;;) {
      gbnf_sequence seq;
      if (auto st = parse_sequence(rule, nested, seq); !st) return st;
      out.push_back(std::move(seq));
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        skip_space(true);
        continue;
      }
      return {};
    }
  }

  void skip_after_item(bool nested) {
    if (nested) skip_space(true);
    else skip_space_continuation();
  }

  status parse_sequence(uint32_t rule, bool nested, gbnf_sequence& seq) {
    size_t last_start = seq.size();  // where the last item (what a postfix applies to) begins
    bool have_last = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      const size_t item_pos = pos_;
      if (c == '"') {
        ++pos_;
        last_start = seq.size();
        while (pos_ < s_.size() && s_[pos_] != '"') {
          if (s_[pos_] == '\n') return fail("unterminated string literal (newline before the closing '\"')");
          uint32_t cp = 0;
          if (auto st = parse_char(cp); !st) return st;
          seq.push_back({gbnf_symbol::type::chars, {{cp, cp}}, 0});
        }
        if (pos_ >= s_.size()) return fail("unterminated string literal (expected '\"')", item_pos);
        ++pos_;
        have_last = seq.size() > last_start;  // a postfix on "" is refused
      } else if (c == '[') {
        ++pos_;
        bool negated = false;
        if (pos_ < s_.size() && s_[pos_] == '^') {
          negated = true;
          ++pos_;
        }
        std::vector<code_range> ranges;
        while (pos_ < s_.size() && s_[pos_] != ']') {
          if (s_[pos_] == '\n') return fail("unterminated character class (expected ']')");
          uint32_t lo = 0;
          if (auto st = parse_char(lo); !st) return st;
          uint32_t hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            if (auto st = parse_char(hi); !st) return st;
            if (hi < lo) return fail("character class range is reversed", item_pos);
          }
          ranges.push_back({lo, hi});
        }
        if (pos_ >= s_.size()) return fail("unterminated character class (expected ']')", item_pos);
        ++pos_;
        ranges = normalize_ranges(std::move(ranges));
        if (negated) ranges = complement_ranges(ranges);
        if (ranges.empty()) return fail("character class matches no character", item_pos);
        last_start = seq.size();
        seq.push_back({gbnf_symbol::type::chars, std::move(ranges), 0});
        have_last = true;
      } else if (c == '.') {
        ++pos_;
        last_start = seq.size();
        seq.push_back({gbnf_symbol::type::chars, {{0, max_code_point}}, 0});
        have_last = true;
      } else if (is_name_char(c)) {
        const std::string name = parse_name();
        // `name ::=` starts the next rule: this sequence ended at the previous line.
        const auto id = rule_id(name);
        first_ref_.emplace(id, where(item_pos));
        last_start = seq.size();
        seq.push_back({gbnf_symbol::type::rule, {}, id});
        have_last = true;
      } else if (c == '(') {
        // Groups nest by recursion: bounded, or a grammar of a few hundred KB of '(' (a request
        // body can hold one) overflows the stack (found by fuzzing).
        if (group_depth_ >= max_gbnf_group_depth)
          return fail("groups nested more than " + std::to_string(max_gbnf_group_depth) + " deep", item_pos);
        ++pos_;
        skip_space(true);
        const uint32_t sub = new_rule(rule);
        std::vector<gbnf_sequence> alts;
        ++group_depth_;
        if (auto st = parse_alternatives(sub, true, alts); !st) return st;
        --group_depth_;
        if (pos_ >= s_.size() || s_[pos_] != ')') return fail("expected ')' to close the group opened at " + where(item_pos) + ", found " + found());
        ++pos_;
        g_.rules[sub].alts = std::move(alts);
        last_start = seq.size();
        seq.push_back({gbnf_symbol::type::rule, {}, sub});
        have_last = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return fail(std::string("'") + c + "' must follow something to repeat");
        uint32_t lo = 0, hi = 0;
        bool unbounded = false;
        ++pos_;
        if (c == '*') {
          unbounded = true;
        } else if (c == '+') {
          lo = 1;
          unbounded = true;
        } else if (c == '?') {
          hi = 1;
        } else {
          skip_space(false);
          if (!parse_uint(lo)) return fail("expected a number after '{', found " + found());
          skip_space(false);
          hi = lo;
          if (pos_ < s_.size() && s_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            if (pos_ < s_.size() && s_[pos_] == '}') unbounded = true;
            else if (!parse_uint(hi)) return fail("expected a number or '}' after ',', found " + found());
            skip_space(false);
          }
          if (pos_ >= s_.size() || s_[pos_] != '}') return fail("expected '}' to close the repetition, found " + found());
          ++pos_;
          if (!unbounded && hi < lo) return fail("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "} has max below min", item_pos);
          if (lo > max_repeat || (!unbounded && hi > max_repeat))
            return fail("repetition count above " + std::to_string(max_repeat), item_pos);
        }
        repeat(rule, seq, last_start, lo, hi, unbounded);
        have_last = false;  // x** is refused (llama.cpp refuses it too)
      } else {
        break;
      }
      skip_after_item(nested);
    }
    return {};
  }

  // Replaces seq[from..] (the last item) by its repetition.
  void repeat(uint32_t rule, gbnf_sequence& seq, size_t from, uint32_t lo, uint32_t hi, bool unbounded) {
    gbnf_sequence item(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end());
    seq.resize(from);
    for (uint32_t i = 0; i < lo; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (unbounded) {
      // R ::= item R |
      const uint32_t r = new_rule(rule);
      gbnf_sequence a = item;
      a.push_back({gbnf_symbol::type::rule, {}, r});
      g_.rules[r].alts = {a, {}};
      repeats_.push_back(r);
      seq.push_back({gbnf_symbol::type::rule, {}, r});
      return;
    }
    // (item (item ...)?)? nested hi - lo deep, so that each state has one way to go on.
    int32_t inner = -1;
    for (uint32_t k = lo; k < hi; ++k) {
      const uint32_t r = new_rule(rule);
      gbnf_sequence a = item;
      if (inner >= 0) a.push_back({gbnf_symbol::type::rule, {}, static_cast<uint32_t>(inner)});
      g_.rules[r].alts = {a, {}};
      inner = static_cast<int32_t>(r);
    }
    if (inner >= 0) seq.push_back({gbnf_symbol::type::rule, {}, static_cast<uint32_t>(inner)});
  }

  bool parse_uint(uint32_t& v) {
    const size_t b = pos_;
    uint64_t x = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      x = x * 10 + static_cast<uint64_t>(s_[pos_] - '0');
      if (x > 1000000) x = 1000000;
      ++pos_;
    }
    v = static_cast<uint32_t>(x);
    return pos_ > b;
  }

  status parse_hex(size_t n, uint32_t& cp) {
    cp = 0;
    for (size_t k = 0; k < n; ++k) {
      if (pos_ >= s_.size()) return fail("expected " + std::to_string(n) + " hex digits in escape");
      const char h = s_[pos_];
      uint32_t d = 0;
      if (h >= '0' && h <= '9') d = static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') d = static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') d = static_cast<uint32_t>(h - 'A' + 10);
      else return fail("expected " + std::to_string(n) + " hex digits in escape, found " + found());
      cp = cp * 16 + d;
      ++pos_;
    }
    if (cp > max_code_point) return fail("escape names a code point above U+10FFFF");
    return {};
  }

  // One character of a literal or class, escapes decoded.
  status parse_char(uint32_t& cp) {
    if (s_[pos_] != '\\') {
      cp = decode_utf8_or_byte(s_, pos_);
      return {};
    }
    ++pos_;
    if (pos_ >= s_.size()) return fail("expected an escape after '\\'");
    const char e = s_[pos_++];
    switch (e) {
      case 'n': cp = '\n'; return {};
      case 'r': cp = '\r'; return {};
      case 't': cp = '\t'; return {};
      case '0': cp = 0; return {};
      case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': cp = static_cast<uint8_t>(e); return {};
      case 'x': return parse_hex(2, cp);
      case 'u': return parse_hex(4, cp);
      case 'U': return parse_hex(8, cp);
      default:
        --pos_;
        return fail(std::string("unknown escape '\\") + e + "' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xNN \\uNNNN \\UNNNNNNNN)");
    }
  }

  result<gbnf_grammar> finish(std::string_view root_rule) {
    size_t n = g_.rules.size();
    for (uint32_t i = 0; i < n; ++i) {
      if (!defined_[i]) {
        auto it = first_ref_.find(i);
        return make_error("grammar: undefined rule '" + g_.rules[i].name + "'" +
                          (it != first_ref_.end() ? " (used at " + it->second + ")" : ""));
      }
    }
    const int32_t root = g_.find(root_rule);
    if (root < 0) return make_error("grammar: no rule '" + std::string(root_rule) + "' (the root rule)");
    g_.root = static_cast<uint32_t>(root);

    // Nullable rules (may match the empty string), to a fixed point.
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : g_.rules[r].alts) {
          bool all = true;
          for (const auto& s : alt)
            if (s.t == gbnf_symbol::type::chars || !nullable[s.rule]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // Productive rules (can finish at all): a rule whose every alternative needs itself never
    // ends, and the matcher would offer tokens from which no document can be completed.
    std::vector<bool> productive(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (productive[r]) continue;
        for (const auto& alt : g_.rules[r].alts) {
          bool all = true;
          for (const auto& s : alt)
            if (s.t == gbnf_symbol::type::rule && !productive[s.rule]) {
              all = false;
              break;
            }
          if (all) {
            productive[r] = changed = true;
            break;
          }
        }
      }
    }
    // Name the rule whose every alternative needs itself, rather than one that merely uses it.
    int32_t stuck = -1;
    for (size_t r = 0; r < n && stuck < 0; ++r) {
      if (productive[r]) continue;
      bool self_every = true;
      for (const auto& alt : g_.rules[r].alts)
        self_every = self_every && std::any_of(alt.begin(), alt.end(), [&](const gbnf_symbol& s) {
                       return s.t == gbnf_symbol::type::rule && s.rule == r;
                     });
      if (self_every) stuck = static_cast<int32_t>(r);
    }
    for (size_t r = 0; r < n && stuck < 0; ++r)
      if (!productive[r]) stuck = static_cast<int32_t>(r);
    if (stuck >= 0)
      return make_error("grammar: rule '" + user_name(static_cast<uint32_t>(stuck)) +
                        "' can never finish (every alternative needs it again)");

    // X* over an X that may match nothing would make `R ::= X R |` left-recursive (R -> X -> ε
    // -> R), though the grammar means something plain: llama.cpp accepts `("a"?)*`, and regexes
    // like `(a|)+` are written so. (X)* equals (X without the empty string)*, so the repeated
    // alternative is rewritten to need a non-empty X; a user's own left recursion stays refused
    // below, as the rewrite only adds rules whose leading symbols mirror those of X.
    // Which rules match some non-empty string (every rule being productive): some alternative
    // holds a character or such a rule.
    non_empty_able_.assign(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (non_empty_able_[r]) continue;
        for (const auto& alt : g_.rules[r].alts)
          if (std::any_of(alt.begin(), alt.end(), [&](const gbnf_symbol& s) {
                return s.t == gbnf_symbol::type::chars || non_empty_able_[s.rule];
              })) {
            non_empty_able_[r] = changed = true;
            break;
          }
      }
    }
    for (uint32_t r : repeats_) rewrite_repeat(r, nullable);
    n = g_.rules.size();
    nullable.resize(n, false);  // every rule the rewrite added needs at least one character

    // Left recursion: a rule reachable from itself through the leading symbols of alternatives
    // (a nullable leading rule lets the next symbol lead too). The matcher expands leading rules
    // eagerly, so such a grammar would never stop expanding.
    std::vector<std::vector<uint32_t>> lead(n);
    for (size_t r = 0; r < n; ++r)
      for (const auto& alt : g_.rules[r].alts)
        for (const auto& s : alt) {
          if (s.t == gbnf_symbol::type::chars) break;
          lead[r].push_back(s.rule);
          if (!nullable[s.rule]) break;
        }
    std::vector<int> color(n, 0);
    std::vector<uint32_t> path;
    std::string cycle;
    std::function<bool(uint32_t)> dfs = [&](uint32_t r) -> bool {
      color[r] = 1;
      path.push_back(r);
      for (uint32_t t : lead[r]) {
        if (color[t] == 1) {
          auto it = std::find(path.begin(), path.end(), t);
          std::string last;
          for (; it != path.end(); ++it) {
            const std::string u = user_name(*it);
            if (u != last) cycle += (cycle.empty() ? "'" : " -> '") + u + "'";
            last = u;
          }
          cycle += " -> '" + user_name(t) + "'";
          return true;
        }
        if (color[t] == 0 && dfs(t)) return true;
      }
      path.pop_back();
      color[r] = 2;
      return false;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (color[r] == 0 && dfs(r))
        return make_error("grammar: left recursion: " + cycle +
                          " (a rule may not start with itself; rewrite it with repetition, e.g. a ::= b (\",\" b)*)");
    return std::move(g_);
  }

  // Rewrites repetition rule `R ::= X R |` to `R ::= X' R |`, X' being X without the empty
  // string, when X may match nothing (see finish()). Done before a rule made by non_empty_rule
  // copies R's alternatives, so that the copy is not left-recursive either.
  void rewrite_repeat(uint32_t r, const std::vector<bool>& nullable) {
    if (!repeat_started_.insert(r).second) return;  // done, or under way (a cycle of rules that match "")
    gbnf_sequence item = g_.rules[r].alts[0];
    item.pop_back();  // the trailing R
    if (!std::all_of(item.begin(), item.end(), [&](const gbnf_symbol& s) {
          return s.t == gbnf_symbol::type::rule && s.rule < nullable.size() && nullable[s.rule];
        }))
      return;
    const auto alts = non_empty(item, 0, nullable);
    if (alts.empty()) {  // X only ever matches "": X* is ""
      g_.rules[r].alts = {{}};
      return;
    }
    gbnf_sequence a;
    if (alts.size() == 1) {
      a = alts[0];
    } else {
      const uint32_t x = new_rule(r);
      g_.rules[x].alts = alts;
      a.push_back({gbnf_symbol::type::rule, {}, x});
    }
    a.push_back({gbnf_symbol::type::rule, {}, r});
    g_.rules[r].alts = {a, {}};
  }
  std::set<uint32_t> repeat_started_;

  // The alternatives matching what seq[i..] matches except the empty string: the first symbol
  // non-empty and the rest as they are, or (when it may be empty) that symbol left out and the
  // rest non-empty. Called once every rule is known to be productive.
  std::vector<gbnf_sequence> non_empty(const gbnf_sequence& seq, size_t i, const std::vector<bool>& nullable) {
    std::vector<gbnf_sequence> out;
    if (i == seq.size()) return out;
    const auto& s = seq[i];
    // Rules made by the rewrite (past the end of `nullable`) all need a character.
    if (s.t == gbnf_symbol::type::chars || s.rule >= nullable.size() || !nullable[s.rule]) {
      out.emplace_back(seq.begin() + static_cast<std::ptrdiff_t>(i), seq.end());
      return out;
    }
    if (const int32_t ne = non_empty_rule(s.rule, nullable); ne >= 0) {
      gbnf_sequence a{{gbnf_symbol::type::rule, {}, static_cast<uint32_t>(ne)}};
      a.insert(a.end(), seq.begin() + static_cast<std::ptrdiff_t>(i) + 1, seq.end());
      out.push_back(std::move(a));
    }
    auto rest = non_empty(seq, i + 1, nullable);
    out.insert(out.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
    return out;
  }
  // A rule matching what nullable rule r matches but the empty string; -1 when r matches only
  // "". Memoized, the rule made before its alternatives, so that recursive rules end.
  int32_t non_empty_rule(uint32_t r, const std::vector<bool>& nullable) {
    if (auto it = non_empty_of_.find(r); it != non_empty_of_.end()) return it->second;
    if (!non_empty_able_[r]) return non_empty_of_[r] = -1;
    if (std::find(repeats_.begin(), repeats_.end(), r) != repeats_.end()) rewrite_repeat(r, nullable);
    const uint32_t x = new_rule(r);
    non_empty_of_[r] = static_cast<int32_t>(x);
    std::vector<gbnf_sequence> alts;
    for (size_t k = 0; k < g_.rules[r].alts.size(); ++k) {
      const gbnf_sequence alt = g_.rules[r].alts[k];  // a copy: new_rule may grow g_.rules
      auto ne = non_empty(alt, 0, nullable);
      alts.insert(alts.end(), std::make_move_iterator(ne.begin()), std::make_move_iterator(ne.end()));
    }
    g_.rules[x].alts = std::move(alts);
    return static_cast<int32_t>(x);
  }
  std::map<uint32_t, int32_t> non_empty_of_;
  std::vector<bool> non_empty_able_;  // rule matches some non-empty string (rules before the rewrite)

  std::string user_name(uint32_t r) const {
    const std::string& n = g_.rules[r].name;
    return n.substr(0, n.find('#'));
  }
};


// A code point inside a class, escaped where the class syntax needs it.
void append_class_char(std::string& out, uint32_t cp) {
  char buf[16];
  if (cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '"') {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp == '\n') {
    out += "\\n";
  } else if (cp == '\t') {
    out += "\\t";
  } else if (cp == '\r') {
    out += "\\r";
  } else if (cp < 0x20 || cp == 0x7F) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    out += buf;
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    out += buf;
  } else {
    model::detail::append_utf8(out, cp);
  }
}

}  // namespace

// Decodes one UTF-8 code point at s[i]; advances i. Invalid bytes decode as themselves (the
// grammar text is normally valid UTF-8; a stray byte stays matchable as that byte value).
uint32_t decode_utf8_or_byte(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int n = b0 < 0x80 ? 0 : (b0 >> 5) == 6 ? 1 : (b0 >> 4) == 14 ? 2 : (b0 >> 3) == 30 ? 3 : -1;
  if (n <= 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return b0;
  }
  uint32_t cp = b0 & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // A 4-byte form past U+10FFFF (F4 90.. to F7 BF BF BF) is no code point either: decoded, it
  // made a character range beyond max_code_point (found by fuzz/structured_grammar_fuzz.cpp).
  if (cp > max_code_point) {
    ++i;
    return b0;
  }
  i += static_cast<size_t>(n) + 1;
  return cp;
}

int32_t gbnf_grammar::find(std::string_view name) const {
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

result<gbnf_grammar> parse_gbnf(std::string_view text, std::string_view root_rule) {
  return parser(text).run(root_rule);
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  char buf[8];
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

std::string gbnf_class(const std::vector<code_range>& ranges) {
  std::string out = "[";
  for (const auto& r : ranges) {
    append_class_char(out, r.lo);
    if (r.hi != r.lo) {
      if (r.hi != r.lo + 1) out += '-';
      append_class_char(out, r.hi);
    }
  }
  out += ']';
  return out;
}

std::vector<code_range> normalize_ranges(std::vector<code_range> r) {
  std::sort(r.begin(), r.end(), [](const code_range& a, const code_range& b) { return a.lo < b.lo; });
  std::vector<code_range> out;
  for (const auto& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1) out.back().hi = std::max(out.back().hi, x.hi);
    else out.push_back(x);
  }
  return out;
}

std::vector<code_range> complement_ranges(const std::vector<code_range>& r) {
  std::vector<code_range> out;
  uint32_t next = 0;
  for (const auto& x : r) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= max_code_point) out.push_back({next, max_code_point});
  return out;
}

}  // namespace troupe::structured

// The lowering of a GBNF grammar to byte level (detail/compiled_constraint.hpp says how), and the
// shortest lengths the matcher's ways to the end are measured with.
#include "structured/detail/compiled_constraint.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::structured {

namespace {

using detail::byte_set;
using detail::sym;
using detail::sym_kind;

inline void add_bytes(byte_set& s, uint8_t lo, uint8_t hi) {
  for (unsigned b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t{1} << (b & 63);
}

// A code-point range as UTF-8 byte-range sequences (each position a [lo, hi] byte range), valid
// encodings only: surrogates left out, every sequence of one length with one range per byte.
using byte_ranges = std::vector<std::pair<uint8_t, uint8_t>>;
// The UTF-8 bytes of `cp` (model/detail/tokenizer_utf8.hpp spells them), into `out`.
int utf8_encode(uint32_t cp, uint8_t* out) {
  std::string b;
  model::detail::append_utf8(b, cp);
  std::copy(b.begin(), b.end(), out);
  return static_cast<int>(b.size());
}
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<byte_ranges>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= limit && hi > limit) {
      utf8_sequences(lo, limit, out);
      utf8_sequences(limit + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  // Split until every byte position but the varying tail is shared and the tail covers full
  // continuation ranges: then the byte ranges multiply exactly to the code-point range.
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = utf8_encode(lo, a);
  utf8_encode(hi, b);
  byte_ranges r;
  for (int k = 0; k < n; ++k) r.emplace_back(a[k], b[k]);
  out.push_back(r);
}

}  // namespace

uint32_t compiled_constraint::add_set(const byte_set& s) {
  for (size_t i = 0; i < sets.size(); ++i)
    if (sets[i] == s) return static_cast<uint32_t>(i);
  sets.push_back(s);
  return static_cast<uint32_t>(sets.size() - 1);
}

void compiled_constraint::lower(const gbnf_grammar& g) {
  const size_t n = g.rules.size();
  alts.resize(n);
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_rules;
  // Pending alternatives of generated class rules are laid out after the grammar's own.
  std::vector<std::pair<uint32_t, std::vector<std::vector<sym>>>> generated;
  auto chars_symbol = [&](const std::vector<code_range>& ranges) -> sym {
    std::vector<byte_ranges> seqs;
    for (const auto& r : ranges) utf8_sequences(r.lo, r.hi, seqs);
    byte_set single{};
    bool has_single = false, has_multi = false;
    for (const auto& s : seqs) {
      if (s.size() == 1) {
        add_bytes(single, s[0].first, s[0].second);
        has_single = true;
      } else {
        has_multi = true;
      }
    }
    if (!has_multi) return {sym_kind::bytes, add_set(single)};
    std::vector<std::pair<uint32_t, uint32_t>> key;
    for (const auto& r : ranges) key.emplace_back(r.lo, r.hi);
    auto it = class_rules.find(key);
    if (it != class_rules.end()) return {sym_kind::ref, it->second};
    const auto rule = static_cast<uint32_t>(alts.size());
    alts.emplace_back();
    class_rules.emplace(key, rule);
    std::vector<std::vector<sym>> rule_alts;
    if (has_single) rule_alts.push_back({{sym_kind::bytes, add_set(single)}});
    for (const auto& s : seqs) {
      if (s.size() == 1) continue;
      std::vector<sym> a;
      for (const auto& br : s) {
        byte_set bs{};
        add_bytes(bs, br.first, br.second);
        a.push_back({sym_kind::bytes, add_set(bs)});
      }
      rule_alts.push_back(a);
    }
    generated.emplace_back(rule, std::move(rule_alts));
    return {sym_kind::ref, rule};
  };
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : g.rules[r].alts) {
      alts[r].push_back(static_cast<uint32_t>(syms.size()));
      for (const auto& s : alt) {
        if (s.t == gbnf_symbol::type::rule) syms.push_back({sym_kind::ref, s.rule});
        else syms.push_back(chars_symbol(s.ranges));
      }
      syms.push_back({sym_kind::end, 0});
    }
  }
  for (auto& [rule, ga] : generated) {
    for (auto& a : ga) {
      alts[rule].push_back(static_cast<uint32_t>(syms.size()));
      syms.insert(syms.end(), a.begin(), a.end());
      syms.push_back({sym_kind::end, 0});
    }
  }
  root = g.root;
  shortest();
}

void compiled_constraint::shortest() {
  constexpr int64_t inf = int64_t{1} << 40;
  min_rule.assign(alts.size(), inf);
  min_from.assign(syms.size() + 1, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = syms.size(); i-- > 0;) {
      const sym& y = syms[i];
      int64_t v = 0;
      if (y.kind == sym_kind::bytes) v = std::min(inf, 1 + min_from[i + 1]);
      else if (y.kind == sym_kind::ref) v = std::min(inf, min_rule[y.arg] + min_from[i + 1]);
      min_from[i] = v;
    }
    for (size_t r = 0; r < alts.size(); ++r) {
      int64_t best = inf;
      for (uint32_t a : alts[r]) best = std::min(best, min_from[a]);
      if (best < min_rule[r]) {
        min_rule[r] = best;
        changed = true;
      }
    }
  }
  for (int64_t m : min_rule)
    if (m < inf) max_rule_min = std::max(max_rule_min, m);
}

}  // namespace troupe::structured

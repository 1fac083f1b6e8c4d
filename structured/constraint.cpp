// The matcher: a pushdown recognizer over bytes, and token masks from a walk of the vocabulary's
// byte trie.
//
// Why hand-written: no C or C++ structured-output engine is packaged for Debian, and the PyPI
// ones (llguidance, xgrammar, outlines-core) are Python bindings over Rust or C++ cores that a C++
// program cannot link without vendoring their sources and toolchains. The design follows the
// published ones (llama.cpp's grammar stacks, llguidance's token trie) without their code.
//
// How it works. The GBNF IR (code-point classes) is lowered to byte level: a class becomes the
// alternatives of its UTF-8 byte sequences (one byte set per position), so a token may end in the
// middle of a multi-byte character and the matcher needs no partial-code-point state: the stacks
// sitting on a continuation byte are that state. A state is the set of stacks of grammar
// positions whose top is a byte set (plus "the output may end here"); a byte keeps the stacks
// whose top set holds it, each then advanced and expanded. Calls in tail position replace their
// frame, so repetition (r ::= x r | ) does not grow the stacks and states repeat.
//
// A mask walks the vocabulary's byte trie in preorder with the state of each depth; a byte that
// kills every stack skips the node's whole subtree. Transitions are memoized per walk (a state
// and a byte -> a state id), so a long token costs one table lookup per byte when the state
// repeats (JSON string contents). Masks are cached per compiled constraint keyed by the state
// (shared by every sequence and thread; bounded).
#include "structured/constraint.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "model/detail/tokenizer_utf8.hpp"
#include "model/tokenizer.hpp"
#include "structured/gbnf.hpp"
#include "structured/json_schema.hpp"
#include "structured/regex.hpp"

namespace troupe::structured {

// ---------------------------------------------------------------------------------- vocabulary

struct token_vocabulary::impl {
  std::vector<std::string> bytes;
  // The byte trie in preorder: node i's subtree is [i, end[i]); node 0 is the root.
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;
  std::vector<uint32_t> end;
  std::vector<uint32_t> tok_begin;  // tokens of node i: toks[tok_begin[i] .. tok_begin[i + 1])
  std::vector<int32_t> toks;
  uint16_t max_depth = 0;
};

namespace {
std::vector<std::string> vocabulary_bytes(const model::tokenizer& tok) {
  std::vector<std::string> out(static_cast<size_t>(tok.n_vocab()));
  for (int32_t t = 0; t < tok.n_vocab(); ++t) {
    const auto ty = tok.type(t);
    if (ty == model::token_type::control || ty == model::token_type::unused || ty == model::token_type::unknown) continue;
    out[static_cast<size_t>(t)] = tok.token_to_piece(t, false);
  }
  return out;
}
}  // namespace

token_vocabulary::token_vocabulary(const model::tokenizer& tok) : token_vocabulary(vocabulary_bytes(tok)) {}

token_vocabulary::token_vocabulary(std::vector<std::string> token_bytes) : d_(std::make_unique<impl>()) {
  auto& d = *d_;
  d.bytes = std::move(token_bytes);
  const auto n = static_cast<int32_t>(d.bytes.size());
  std::vector<int32_t> order;
  for (int32_t t = 0; t < n; ++t)
    if (!d.bytes[static_cast<size_t>(t)].empty()) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return d.bytes[static_cast<size_t>(a)] < d.bytes[static_cast<size_t>(b)];
  });
  d.byte.push_back(0);
  d.depth.push_back(0);
  d.end.push_back(0);
  std::vector<uint32_t> path = {0};
  std::vector<std::pair<uint32_t, int32_t>> owned;  // (node, token), nodes nondecreasing
  const std::string* prev = nullptr;
  auto close_to = [&](size_t len) {
    while (path.size() > len + 1) {
      d.end[path.back()] = static_cast<uint32_t>(d.byte.size());
      path.pop_back();
    }
  };
  for (int32_t t : order) {
    const std::string& s = d.bytes[static_cast<size_t>(t)];
    size_t lcp = 0;
    if (prev)
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    close_to(lcp);
    for (size_t k = lcp; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(d.byte.size()));
      d.byte.push_back(static_cast<uint8_t>(s[k]));
      d.depth.push_back(static_cast<uint16_t>(std::min<size_t>(k + 1, 65535)));
      d.end.push_back(0);
      d.max_depth = std::max<uint16_t>(d.max_depth, d.depth.back());
    }
    owned.emplace_back(path.back(), t);
    prev = &s;
  }
  close_to(0);
  d.end[0] = static_cast<uint32_t>(d.byte.size());
  d.tok_begin.assign(d.byte.size() + 1, 0);
  for (const auto& o : owned) ++d.tok_begin[o.first + 1];
  for (size_t i = 1; i < d.tok_begin.size(); ++i) d.tok_begin[i] += d.tok_begin[i - 1];
  d.toks.resize(owned.size());
  for (size_t i = 0; i < owned.size(); ++i) d.toks[i] = owned[i].second;  // already grouped by node
}

token_vocabulary::~token_vocabulary() = default;
int32_t token_vocabulary::n_vocab() const { return static_cast<int32_t>(d_->bytes.size()); }
const std::string& token_vocabulary::bytes(int32_t token) const { return d_->bytes[static_cast<size_t>(token)]; }

// ----------------------------------------------------------------------- byte-level grammar

namespace {

enum class sym_kind : uint8_t { bytes, ref, end };
struct sym {
  sym_kind kind;
  uint32_t arg;  // bytes: index into sets; ref: rule
};
using byte_set = std::array<uint64_t, 4>;
inline bool has_byte(const byte_set& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
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

class compiled_constraint {
 public:
  std::shared_ptr<const token_vocabulary> vocab;
  std::vector<sym> syms;
  std::vector<byte_set> sets;
  std::vector<std::vector<uint32_t>> alts;  // rule -> start positions of its alternatives
  uint32_t root = 0;
  // The fewest bytes from each position to the end of its alternative (calls at their rules'
  // shortest), and each rule's shortest sentence: how far a state is from a complete output.
  std::vector<int64_t> min_from;
  std::vector<int64_t> min_rule;

  // The mask cache: state key -> mask. Bounded; the oldest entries go first.
  mutable std::shared_mutex mu;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> masks;
  mutable std::deque<std::string> order;
  mutable std::atomic<int64_t> hits{0}, misses{0};
  size_t max_masks = 1024;

  uint32_t add_set(const byte_set& s) {
    for (size_t i = 0; i < sets.size(); ++i)
      if (sets[i] == s) return static_cast<uint32_t>(i);
    sets.push_back(s);
    return static_cast<uint32_t>(sets.size() - 1);
  }

  void lower(const gbnf_grammar& g) {
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

  // Fixed point of the shortest lengths (the grammar has no rule that cannot finish: gbnf refuses
  // those, so every length is finite).
  void shortest() {
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
  }
};

// ------------------------------------------------------------------------------ the recognizer

namespace {

using stack = std::vector<uint32_t>;

struct rstate {
  std::vector<stack> stacks;  // sorted, unique; every top is a byte-set position
  bool accepting = false;     // an empty stack: the output may end here
  bool dead() const { return stacks.empty() && !accepting; }
  std::string key() const {
    std::string k;
    k.reserve(64);
    k += accepting ? 'A' : 'a';
    for (const auto& s : stacks) {
      const auto n = static_cast<uint32_t>(s.size());
      k.append(reinterpret_cast<const char*>(&n), sizeof n);
      k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
    }
    return k;
  }
};

// Expands `s` (top: any position) until its top is a byte set, adding the results to `out`.
void expand(const compiled_constraint& c, stack s, rstate& out) {
  for (;;) {
    if (s.empty()) {
      out.accepting = true;
      return;
    }
    const uint32_t pos = s.back();
    const sym& y = c.syms[pos];
    if (y.kind == sym_kind::bytes) {
      out.stacks.push_back(std::move(s));
      return;
    }
    if (y.kind == sym_kind::end) {
      s.pop_back();
      continue;
    }
    // A call: the frame keeps the return position, unless the call is the alternative's last
    // symbol (a tail call), which replaces the frame.
    if (c.syms[pos + 1].kind == sym_kind::end) s.pop_back();
    else s.back() = pos + 1;
    const auto& as = c.alts[y.arg];
    for (size_t i = 0; i + 1 < as.size(); ++i) {
      stack t = s;
      t.push_back(as[i]);
      expand(c, std::move(t), out);
    }
    s.push_back(as.back());
  }
}

void normalize(rstate& st) {
  std::sort(st.stacks.begin(), st.stacks.end());
  st.stacks.erase(std::unique(st.stacks.begin(), st.stacks.end()), st.stacks.end());
}

rstate initial_state(const compiled_constraint& c) {
  rstate st;
  for (uint32_t a : c.alts[c.root]) expand(c, stack{a}, st);
  normalize(st);
  return st;
}

rstate advance(const compiled_constraint& c, const rstate& from, uint8_t b) {
  rstate out;
  for (const auto& s : from.stacks) {
    const uint32_t pos = s.back();
    if (!has_byte(c.sets[c.syms[pos].arg], b)) continue;
    stack t = s;
    t.back() = pos + 1;
    expand(c, std::move(t), out);
  }
  normalize(out);
  return out;
}

}  // namespace

// --------------------------------------------------------------------------------- compile

result<std::string> to_gbnf(const constraint_spec& spec) {
  if (spec.kind == kind::json_object) return json_object_gbnf();
  if (spec.kind == kind::json_schema) return json_schema_to_gbnf(spec.source);
  if (spec.kind == kind::grammar) return spec.source;
  if (spec.kind == kind::regex) {
    auto e = regex_to_gbnf(spec.source);
    if (!e) return make_error(e.error());
    return "root ::= " + e.value() + "\n";
  }
  if (spec.kind == kind::choice) {
    auto e = choice_to_gbnf(spec.source);
    if (!e) return make_error(e.error());
    return "root ::= " + e.value() + "\n";
  }
  return make_error("unknown constraint kind '" + spec.kind + "' (known: json_object, json_schema, grammar, regex, choice)");
}

result<std::shared_ptr<const compiled_constraint>> compile(const constraint_spec& spec,
                                                           std::shared_ptr<const token_vocabulary> vocab) {
  if (!vocab) return make_error("structured: compile needs a vocabulary");
  auto text = to_gbnf(spec);
  if (!text) return make_error(text.error());
  auto g = parse_gbnf(text.value());
  if (!g) {
    // The translated kinds' grammars are ours: failing to parse one is a bug worth naming as such.
    if (spec.kind != kind::grammar) return make_error("structured: internal error, " + spec.kind + " grammar: " + g.error());
    return make_error(g.error());
  }
  auto c = std::make_shared<compiled_constraint>();
  c->vocab = std::move(vocab);
  c->lower(g.value());
  // About 32 MiB of masks at most.
  const size_t mask_bytes = (static_cast<size_t>(c->vocab->n_vocab()) + 63) / 64 * 8;
  c->max_masks = std::max<size_t>(16, (size_t{32} << 20) / std::max<size_t>(mask_bytes, 1));
  return std::shared_ptr<const compiled_constraint>(std::move(c));
}

constraint_stats stats(const compiled_constraint& c) {
  std::shared_lock lock(c.mu);
  return {c.hits.load(), c.misses.load(), static_cast<int64_t>(c.masks.size())};
}

// ---------------------------------------------------------------------------------- matcher

struct matcher::state {
  std::shared_ptr<const compiled_constraint> c;
  rstate st;
  bool ended = false;  // an end-of-generation (control) token was accepted
  int64_t n = 0;
};

matcher::matcher(std::shared_ptr<const compiled_constraint> c) : s_(std::make_unique<state>()) {
  s_->c = std::move(c);
  s_->st = initial_state(*s_->c);
}
matcher::matcher(const matcher& o) : s_(std::make_unique<state>(*o.s_)) {}
matcher& matcher::operator=(const matcher& o) {
  if (this != &o) s_ = std::make_unique<state>(*o.s_);
  return *this;
}
matcher::matcher(matcher&&) noexcept = default;
matcher& matcher::operator=(matcher&&) noexcept = default;
matcher::~matcher() = default;

namespace {

// The mask of `st`, by a walk of the vocabulary trie.
void compute_mask(const compiled_constraint& c, const rstate& start, std::vector<uint64_t>& mask) {
  const auto& v = c.vocab->data();
  std::vector<rstate> states;
  std::unordered_map<std::string, int32_t> ids;
  std::vector<int32_t> trans;  // state * 256 + byte -> state, -1 dead, -2 not computed yet
  auto intern = [&](rstate&& s) -> int32_t {
    if (s.dead()) return -1;
    auto k = s.key();
    auto it = ids.find(k);
    if (it != ids.end()) return it->second;
    const auto id = static_cast<int32_t>(states.size());
    ids.emplace(std::move(k), id);
    states.push_back(std::move(s));
    trans.resize(states.size() * 256, -2);
    return id;
  };
  intern(rstate(start));
  std::vector<int32_t> at(static_cast<size_t>(v.max_depth) + 1, 0);
  const auto n_nodes = static_cast<uint32_t>(v.byte.size());
  for (uint32_t i = 1; i < n_nodes;) {
    const uint16_t d = v.depth[i];
    const int32_t from = at[d - 1];
    const uint8_t b = v.byte[i];
    int32_t to = trans[static_cast<size_t>(from) * 256 + b];
    if (to == -2) {
      to = intern(advance(c, states[static_cast<size_t>(from)], b));
      trans[static_cast<size_t>(from) * 256 + b] = to;
    }
    if (to < 0) {
      i = v.end[i];
      continue;
    }
    at[d] = to;
    for (uint32_t k = v.tok_begin[i]; k < v.tok_begin[i + 1]; ++k) {
      const auto t = static_cast<uint32_t>(v.toks[k]);
      mask[t >> 6] |= uint64_t{1} << (t & 63);
    }
    ++i;
  }
}

}  // namespace

void matcher::allowed_tokens(std::vector<uint64_t>& mask) {
  const auto& c = *s_->c;
  const size_t words = (static_cast<size_t>(c.vocab->n_vocab()) + 63) / 64;
  mask.assign(words, 0);
  if (s_->ended || s_->st.stacks.empty()) return;
  const std::string key = s_->st.key();
  {
    std::shared_lock lock(c.mu);
    auto it = c.masks.find(key);
    if (it != c.masks.end()) {
      std::copy(it->second->begin(), it->second->end(), mask.begin());
      // Counters under a shared lock: a relaxed figure for benchmarks, not for logic.
      ++c.hits;
      return;
    }
  }
  compute_mask(c, s_->st, mask);
  auto stored = std::make_shared<const std::vector<uint64_t>>(mask);
  std::unique_lock lock(c.mu);
  ++c.misses;
  if (c.masks.emplace(key, std::move(stored)).second) {
    c.order.push_back(key);
    while (c.masks.size() > c.max_masks) {
      c.masks.erase(c.order.front());
      c.order.pop_front();
    }
  }
}

bool matcher::accept(int32_t token) {
  const auto& c = *s_->c;
  if (s_->ended || token < 0 || token >= c.vocab->n_vocab()) return false;
  const std::string& b = c.vocab->bytes(token);
  if (b.empty()) {
    if (!s_->st.accepting) return false;
    s_->ended = true;
    ++s_->n;
    return true;
  }
  rstate cur = s_->st;
  for (char ch : b) {
    cur = advance(c, cur, static_cast<uint8_t>(ch));
    if (cur.dead()) return false;
  }
  s_->st = std::move(cur);
  ++s_->n;
  return true;
}

namespace {

// The fewest bytes that complete the output from `st`, and the stack that does it.
int64_t min_to_end(const compiled_constraint& c, const rstate& st, const stack** best) {
  int64_t m = st.accepting ? 0 : std::numeric_limits<int64_t>::max();
  if (best) *best = nullptr;
  if (m == 0) return 0;
  for (const auto& s : st.stacks) {
    int64_t cost = 0;
    for (uint32_t pos : s) cost += c.min_from[pos];
    if (cost < m) {
      m = cost;
      if (best) *best = &s;
    }
  }
  return m;
}

}  // namespace

int64_t matcher::min_bytes_to_end() const {
  if (s_->ended) return 0;
  return min_to_end(*s_->c, s_->st, nullptr);
}

std::string matcher::shortest_completion() const {
  std::string out;
  if (s_->ended) return out;
  const auto& c = *s_->c;
  rstate st = s_->st;
  for (;;) {
    const stack* best = nullptr;
    if (min_to_end(c, st, &best) == 0 || !best) return out;
    // Any byte of the best stack's top set takes it one byte closer (min_from[top] is 1 + the rest):
    // the lowest printable one, else the lowest.
    const byte_set& set = c.sets[c.syms[best->back()].arg];
    int chosen = -1;
    for (int b = 0x20; b < 0x7f && chosen < 0; ++b)
      if (has_byte(set, static_cast<uint8_t>(b))) chosen = b;
    for (int b = 0; b < 256 && chosen < 0; ++b)
      if (has_byte(set, static_cast<uint8_t>(b))) chosen = b;
    if (chosen < 0) return out;
    out += static_cast<char>(chosen);
    st = advance(c, st, static_cast<uint8_t>(chosen));
  }
}

void matcher::closing_tokens(std::vector<uint64_t>& mask) {
  const auto& c = *s_->c;
  const int32_t n = c.vocab->n_vocab();
  mask.assign((static_cast<size_t>(n) + 63) / 64, 0);
  const std::string rest = shortest_completion();
  if (rest.empty()) return;
  for (int32_t t = 0; t < n; ++t) {
    const std::string& b = c.vocab->bytes(t);
    if (!b.empty() && b.size() <= rest.size() && rest.compare(0, b.size(), b) == 0)
      mask[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
  }
}

bool matcher::can_end() const { return s_->ended || s_->st.accepting; }
bool matcher::must_end() const { return s_->ended || (s_->st.accepting && s_->st.stacks.empty()); }
int64_t matcher::n_accepted() const { return s_->n; }

}  // namespace troupe::structured

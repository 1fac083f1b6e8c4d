// The matcher: a pushdown recognizer over bytes, and token masks from a walk of the vocabulary's
// byte trie.
//
// Why hand-written: no C or C++ structured-output engine is packaged for Debian, and the PyPI
// ones (llguidance, xgrammar, outlines-core) are Python bindings over Rust or C++ cores that a C++
// program cannot link without vendoring their sources and toolchains. The design follows the
// published ones (llama.cpp's grammar stacks, llguidance's token trie) without their code.
//
// How it works. The grammar is matched at byte level (detail/compiled_constraint.hpp lowers it and
// says why). A state is the set of stacks of grammar positions whose top is a byte set (plus "the
// output may end here"); a byte keeps the stacks whose top set holds it, each then advanced and
// expanded. Calls in tail position replace their frame, so repetition (r ::= x r | ) does not grow
// the stacks and states repeat.
//
// A mask walks the vocabulary's byte trie in preorder with the state of each depth; a byte that
// kills every stack skips the node's whole subtree. Transitions are memoized per walk (a state
// and a byte -> a state id), so a long token costs one table lookup per byte when the state
// repeats (JSON string contents). Masks are cached per compiled constraint keyed by the state
// (shared by every sequence and thread; bounded).
//
// States that differ only deep in their stacks (the 7th item of an array against the 8th, a string
// inside one object member against the same string type inside another) share most of their mask:
// a token that never pops below the top few frames is allowed or not whatever lies beneath. So a
// state missing from the cache is cut to its stacks' top `context_frames` frames over a marker, and
// that cut state's walk is cached too (by the cut key): the tokens it allows outright, and the trie
// nodes where some stack popped into the marker (there the rest of the stack decides). The state's
// own mask is then that cached part plus a walk of only those nodes' subtrees with the whole
// stacks: typically a few hundred tokens instead of the vocabulary (the idea of XGrammar's
// context-independent tokens; arXiv 2411.15100).
#include "structured/constraint.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "model/tokenizer.hpp"
#include "structured/detail/compiled_constraint.hpp"
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

// ------------------------------------------------------------------------------ the recognizer

namespace {

using detail::byte_set;
using detail::has_byte;
using detail::sym;
using detail::sym_kind;

using stack = std::vector<uint32_t>;

// The bottom of a cut stack: what lies beneath is not known here.
constexpr uint32_t cut_marker = std::numeric_limits<uint32_t>::max();

struct rstate {
  std::vector<stack> stacks;  // sorted, unique; every top is a byte-set position (or a cut marker)
  bool accepting = false;     // an empty stack: the output may end here
  bool touched_cut = false;   // the byte that made this state was one a cut stack would have
                              // consumed beneath its marker (not part of the state: not in the key)
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
    if (pos == cut_marker) {  // what follows lies beneath the cut: the next byte decides there
      out.stacks.push_back(std::move(s));
      return;
    }
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
    if (pos == cut_marker) {  // a byte consumed beneath the cut
      out.touched_cut = true;
      continue;
    }
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
    // A schema whose $ref recursion has no way out ({"$ref": "#"}) translates to rules that can
    // never finish: the schema's fault, said in its words. Otherwise the translated kinds'
    // grammars are ours, and failing to parse one is a bug worth naming as such.
    if (spec.kind == kind::json_schema && g.error().find("can never finish") != std::string::npos)
      return make_error("json_schema: the schema admits no finite document (a $ref recursion with no way out)");
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
  constraint_stats s;
  s.mask_cache_hits = c.masks.hits.load();
  s.mask_cache_misses = c.masks.misses.load();
  s.mask_cache_entries = static_cast<int64_t>(c.masks.items.size());
  s.cut_cache_hits = c.cuts.hits.load();
  s.cut_cache_misses = c.cuts.misses.load();
  return s;
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

// A walk of the vocabulary trie from `start`, setting in `mask` the bits of the tokens it allows.
// With `pending` (a walk of a cut state): a node whose byte some stack would consume beneath its
// cut marker is recorded there and its subtree skipped, its own tokens included unless another
// stack allows them; false (the walk abandoned) once the skipped subtrees hold more than
// `pending_limit` nodes. With `only` (sorted nodes): only those nodes' subtrees are walked, and
// the paths to them.
bool walk(const compiled_constraint& c, const rstate& start, std::vector<uint64_t>& mask,
          std::vector<uint32_t>* pending, const std::vector<uint32_t>* only, uint32_t pending_limit = 0) {
  const auto& v = c.vocab->data();
  std::vector<rstate> states;
  std::unordered_map<std::string, int32_t> ids;
  std::vector<int32_t> trans;   // state * 256 + byte -> state, -1 dead, -2 not computed yet
  std::vector<uint8_t> touch;   // state * 256 + byte -> the byte went beneath a cut marker
  auto intern = [&](rstate&& s) -> int32_t {
    if (s.dead()) return -1;
    auto k = s.key();
    auto it = ids.find(k);
    if (it != ids.end()) return it->second;
    const auto id = static_cast<int32_t>(states.size());
    ids.emplace(std::move(k), id);
    states.push_back(std::move(s));
    trans.resize(states.size() * 256, -2);
    touch.resize(states.size() * 256, 0);
    return id;
  };
  intern(rstate(start));
  std::vector<int32_t> at(static_cast<size_t>(v.max_depth) + 1, 0);
  const auto n_nodes = static_cast<uint32_t>(v.byte.size());
  uint32_t inside_until = 0;  // with `only`: the end of the subtree being walked whole
  uint32_t pending_nodes = 0;
  for (uint32_t i = 1; i < n_nodes;) {
    if (only && i >= inside_until) {
      auto r = std::lower_bound(only->begin(), only->end(), i);
      if (r == only->end()) break;
      if (*r >= v.end[i]) {  // nothing asked for below this node
        i = v.end[i];
        continue;
      }
      if (*r == i) inside_until = v.end[i];
    }
    const uint16_t d = v.depth[i];
    const int32_t from = at[d - 1];
    const uint8_t b = v.byte[i];
    const size_t ti = static_cast<size_t>(from) * 256 + b;
    int32_t to = trans[ti];
    if (to == -2) {
      rstate next = advance(c, states[static_cast<size_t>(from)], b);
      touch[ti] = next.touched_cut ? 1 : 0;
      to = intern(std::move(next));
      trans[ti] = to;
    }
    if (to >= 0) {
      for (uint32_t k = v.tok_begin[i]; k < v.tok_begin[i + 1]; ++k) {
        const auto t = static_cast<uint32_t>(v.toks[k]);
        mask[t >> 6] |= uint64_t{1} << (t & 63);
      }
    }
    if (touch[ti] && pending) {
      pending->push_back(i);
      pending_nodes += v.end[i] - i;
      if (pending_nodes > pending_limit) return false;
      i = v.end[i];
      continue;
    }
    if (to < 0) {
      i = v.end[i];
      continue;
    }
    at[d] = to;
    ++i;
  }
  return true;
}

// `st` with every stack longer than `frames` cut to its top `frames` frames over the marker; false
// when no stack is that long (the cut state is the state).
bool cut(const rstate& st, uint32_t frames, rstate& out) {
  bool any = false;
  out.accepting = st.accepting;
  out.stacks.clear();
  for (const auto& s : st.stacks) {
    if (s.size() <= frames) {
      out.stacks.push_back(s);
      continue;
    }
    any = true;
    stack t;
    t.reserve(frames + 1);
    t.push_back(cut_marker);
    t.insert(t.end(), s.end() - frames, s.end());
    out.stacks.push_back(std::move(t));
  }
  normalize(out);
  return any;
}

// The depths tried, shallowest first: the shallower the cut, the more states share it (the items
// of an array differ one frame down), the deeper, the fewer tokens its frames leave undecided (a
// JSON string's character loop spans three frames). A cut that leaves more than an eighth of the
// trie undecided is passed over for the next.
constexpr std::array<uint32_t, 3> cut_depths = {1, 3, 6};

}  // namespace

void matcher::allowed_tokens(std::vector<uint64_t>& mask) {
  const auto& c = *s_->c;
  const size_t words = (static_cast<size_t>(c.vocab->n_vocab()) + 63) / 64;
  mask.assign(words, 0);
  if (s_->ended || s_->st.stacks.empty()) return;
  const std::string key = s_->st.key();
  {
    std::shared_lock lock(c.mu);
    if (auto m = c.masks.find(key)) {
      std::copy(m->begin(), m->end(), mask.begin());
      return;
    }
  }
  const auto limit = static_cast<uint32_t>(c.vocab->data().byte.size() / 8);
  bool done = false;
  rstate top;
  for (uint32_t frames : cut_depths) {
    if (!cut(s_->st, frames, top)) break;  // no stack that deep: the whole walk below
    const std::string top_key = std::string(1, static_cast<char>(frames)) + top.key();
    std::shared_ptr<const compiled_constraint::cut_walk> part;
    {
      std::shared_lock lock(c.mu);
      part = c.cuts.find(top_key);
    }
    if (!part) {
      auto w = std::make_shared<compiled_constraint::cut_walk>();
      w->mask.assign(words, 0);
      if (!walk(c, top, w->mask, &w->pending, nullptr, limit)) {
        w->too_shallow = true;
        w->mask.clear();
        w->pending.clear();
      }
      part = w;
      std::unique_lock lock(c.mu);
      c.cuts.put(top_key, part, c.max_masks);
    }
    if (part->too_shallow) continue;
    std::copy(part->mask.begin(), part->mask.end(), mask.begin());
    if (!part->pending.empty()) walk(c, s_->st, mask, nullptr, &part->pending);
    done = true;
    break;
  }
  if (!done) walk(c, s_->st, mask, nullptr, nullptr);
  auto stored = std::make_shared<const std::vector<uint64_t>>(mask);
  std::unique_lock lock(c.mu);
  c.masks.put(key, std::move(stored), c.max_masks);
}

void matcher::allowed_tokens_reference(std::vector<uint64_t>& mask) const {
  const auto& c = *s_->c;
  mask.assign((static_cast<size_t>(c.vocab->n_vocab()) + 63) / 64, 0);
  if (s_->ended || s_->st.stacks.empty()) return;
  walk(c, s_->st, mask, nullptr, nullptr);
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

namespace {

// The shortest completion of `st`, byte by byte to `more(byte)`, until it ends or `more` says stop.
template <typename More>
void shortest_completion_of(const compiled_constraint& c, rstate st, More more) {
  for (;;) {
    const stack* best = nullptr;
    if (min_to_end(c, st, &best) == 0 || !best) return;
    // Any byte of the best stack's top set takes it one byte closer (min_from[top] is 1 + the rest):
    // the lowest printable one, else the lowest.
    const byte_set& set = c.sets[c.syms[best->back()].arg];
    int chosen = -1;
    for (int b = 0x20; b < 0x7f && chosen < 0; ++b)
      if (has_byte(set, static_cast<uint8_t>(b))) chosen = b;
    for (int b = 0; b < 256 && chosen < 0; ++b)
      if (has_byte(set, static_cast<uint8_t>(b))) chosen = b;
    if (chosen < 0 || !more(static_cast<uint8_t>(chosen))) return;
    st = advance(c, st, static_cast<uint8_t>(chosen));
  }
}

}  // namespace

std::string matcher::shortest_completion() const {
  std::string out;
  if (s_->ended) return out;
  shortest_completion_of(*s_->c, s_->st, [&](uint8_t b) {
    out += static_cast<char>(b);
    return true;
  });
  return out;
}

void matcher::closing_tokens(std::vector<uint64_t>& mask) {
  const auto& c = *s_->c;
  const auto& v = c.vocab->data();
  mask.assign((static_cast<size_t>(c.vocab->n_vocab()) + 63) / 64, 0);
  if (s_->ended) return;
  // The tokens that are prefixes of the completion lie on its path down the trie: the completion
  // is followed only as far as the trie goes, one step per byte, never a pass over the vocabulary.
  uint32_t node = 0;
  shortest_completion_of(c, s_->st, [&](uint8_t b) {
    uint32_t child = node + 1;  // the children in byte order, each after its siblings' subtrees
    while (child < v.end[node] && v.byte[child] != b) child = v.end[child];
    if (child >= v.end[node]) return false;
    node = child;
    for (uint32_t k = v.tok_begin[node]; k < v.tok_begin[node + 1]; ++k) {
      const auto t = static_cast<uint32_t>(v.toks[k]);
      mask[t >> 6] |= uint64_t{1} << (t & 63);
    }
    return true;
  });
}

int64_t matcher::max_entry_bytes() const { return s_->c->max_rule_min; }

void matcher::drop_tokens_past(std::vector<uint64_t>& mask, int64_t budget) {
  if (s_->ended) return;
  const auto& c = *s_->c;
  // The fewest bytes to the end after each first byte (-1: not asked yet); a token's further
  // bytes can each take at most one off it, which gives a lower bound for the token.
  std::array<int64_t, 256> after;
  after.fill(-1);
  for (size_t w = 0; w < mask.size(); ++w) {
    for (uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
      const auto t = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
      const std::string& b = c.vocab->bytes(t);
      if (b.empty()) continue;
      const auto first = static_cast<uint8_t>(b[0]);
      if (after[first] < 0) {
        const rstate next = advance(c, s_->st, first);
        after[first] = next.dead() ? std::numeric_limits<int64_t>::max() / 2 : min_to_end(c, next, nullptr);
      }
      if (after[first] - static_cast<int64_t>(b.size() - 1) > budget) mask[w] &= ~(uint64_t{1} << (t - static_cast<int32_t>(w * 64)));
    }
  }
}

bool matcher::can_end() const { return s_->ended || s_->st.accepting; }
bool matcher::must_end() const { return s_->ended || (s_->st.accepting && s_->st.stacks.empty()); }
int64_t matcher::n_accepted() const { return s_->n; }

}  // namespace troupe::structured

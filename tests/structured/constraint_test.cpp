// The matcher and its token masks on a small hand-made vocabulary: every single byte is a token
// (as in byte-level BPE), plus multi-byte tokens that span grammar symbols and split UTF-8
// characters, plus one control token.
#include "structured/constraint.hpp"

#include <gtest/gtest.h>

#include <thread>

using namespace troupe::structured;

namespace {

constexpr int32_t control_token = 256;

std::vector<std::string> test_tokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  t.emplace_back("");  // 256: a control token (<|im_end|>)
  for (const char* s : {"{\"", "\": ", "\", \"", "\"}", "true", "false", "null", "12", "345", "ab", "abc", "\xC3\xA9",
                        "\xC3", "\xA9\"", "\xE6\x97\xA5\xE6\x9C\xAC", "\xE6\x97", "\x97\xA5", "\"name\": \"", ", ", "[1",
                        "]]", "\"}]", "aaaa", "a\"", "\\\"", "\\u00", "e9", "20", "-0", "00", "yes", "no", "maybe"})
    t.emplace_back(s);
  return t;
}

std::shared_ptr<const token_vocabulary> vocab() {
  static auto v = std::make_shared<const token_vocabulary>(test_tokens());
  return v;
}

std::shared_ptr<const compiled_constraint> compiled(const std::string& kind, const std::string& source) {
  auto c = compile({kind, source}, vocab());
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? c.value() : nullptr;
}

// Feeds `text` one byte token at a time; false at the first byte refused.
bool feed(matcher& m, std::string_view text) {
  for (char ch : text)
    if (!m.accept(static_cast<uint8_t>(ch))) return false;
  return true;
}

// Whole `text` accepted as a complete sentence.
bool matches(const std::shared_ptr<const compiled_constraint>& c, std::string_view text) {
  matcher m(c);
  return feed(m, text) && m.can_end();
}

bool bit(const std::vector<uint64_t>& mask, int32_t t) { return (mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }

// The mask of m's state against each token fed alone to a copy of m.
void expect_mask_brute_force(const matcher& m, const std::string& where) {
  matcher probe = m;
  std::vector<uint64_t> mask;
  probe.allowed_tokens(mask);
  ASSERT_EQ(mask.size(), static_cast<size_t>((vocab()->n_vocab() + 63) / 64));
  for (int32_t t = 0; t < vocab()->n_vocab(); ++t) {
    matcher copy = m;
    const bool ok = vocab()->bytes(t).empty() ? false : copy.accept(t);
    EXPECT_EQ(bit(mask, t), ok) << where << ": token " << t << " '" << vocab()->bytes(t) << "'";
  }
}

}  // namespace

TEST(Constraint, UnknownKindIsNamed) {
  auto c = compile({"yaml", "x"}, vocab());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("unknown constraint kind 'yaml'"), std::string::npos) << c.error();
  EXPECT_NE(c.error().find("json_schema"), std::string::npos);
}

TEST(Constraint, GrammarErrorsSurfaceFromCompile) {
  auto c = compile({kind::grammar, "root ::= foo"}, vocab());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("undefined rule 'foo'"), std::string::npos) << c.error();
}

// A schema whose $ref recursion has no way out admits no finite document: the schema's fault,
// named as a json_schema error (not as an internal error of the translation).
TEST(Constraint, ASchemaWithNoFiniteDocumentIsNamed) {
  for (const char* schema : {R"({"$ref": "#"})", R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})"}) {
    auto c = compile({kind::json_schema, schema}, vocab());
    ASSERT_FALSE(c.ok()) << schema;
    EXPECT_EQ(c.error().rfind("json_schema: the schema admits no finite document", 0), 0u) << c.error();
  }
  // With a way out (the property optional) it compiles.
  EXPECT_TRUE(compile({kind::json_schema, R"({"type": "object", "properties": {"a": {"$ref": "#"}}})"}, vocab()).ok());
}

TEST(Constraint, AcceptsAndRejectsByteSequences) {
  auto c = compiled(kind::grammar, "root ::= \"a\" [0-9]+ (\"x\" | \"yz\")?");
  EXPECT_TRUE(matches(c, "a1"));
  EXPECT_TRUE(matches(c, "a123x"));
  EXPECT_TRUE(matches(c, "a9yz"));
  EXPECT_FALSE(matches(c, "a"));      // a prefix, not complete
  EXPECT_FALSE(matches(c, "a1y"));    // a prefix
  EXPECT_FALSE(matches(c, "b1"));     // refused at once
  EXPECT_FALSE(matches(c, "a1xz"));   // nothing may follow x
}

TEST(Constraint, RefusedTokenLeavesTheStateUnchanged) {
  auto c = compiled(kind::grammar, "root ::= \"ab\" \"c\"");
  matcher m(c);
  EXPECT_TRUE(m.accept('a'));
  EXPECT_FALSE(m.accept(vocab()->n_vocab() - 1));  // "maybe"
  EXPECT_FALSE(m.accept('c'));
  EXPECT_TRUE(m.accept('b'));
  EXPECT_TRUE(m.accept('c'));
  EXPECT_EQ(m.n_accepted(), 3);
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.must_end());
}

TEST(Constraint, ATokenMaySpanSeveralSymbols) {
  auto c = compiled(kind::grammar, "root ::= \"{\" \"\\\"\" [a-z]+ \"\\\": \" (\"true\" | \"false\") \"}\"");
  matcher m(c);
  auto tok = [](const char* s) {
    for (int32_t t = 257; t < vocab()->n_vocab(); ++t)
      if (vocab()->bytes(t) == s) return t;
    return -1;
  };
  EXPECT_TRUE(m.accept(tok("{\"")));
  EXPECT_TRUE(m.accept(tok("abc")));
  EXPECT_TRUE(m.accept(tok("\": ")));
  EXPECT_FALSE(m.accept(tok("null")));
  EXPECT_TRUE(m.accept(tok("true")));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept('}'));
  EXPECT_TRUE(m.must_end());
}

TEST(Constraint, MultiByteCharactersSplitAcrossTokens) {
  // [^a-z"] holds é (C3 A9) and 日 (E6 97 A5); a token may end inside either.
  auto c = compiled(kind::grammar, "root ::= [^a-z\"]{2} \"\\\"\"");
  matcher m(c);
  EXPECT_TRUE(m.accept(0xC3));  // the first byte of é alone
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept('x'));  // not a continuation byte
  std::vector<uint64_t> mask;
  m.allowed_tokens(mask);
  EXPECT_TRUE(bit(mask, 0xA9));
  EXPECT_FALSE(bit(mask, 'a'));
  expect_mask_brute_force(m, "after C3");
  // "\xA9\"" would close é and then need one more character before '"': refused here...
  matcher m2 = m;
  EXPECT_TRUE(m2.accept(0xA9));
  // ...and after é, "日" split as E6 97 | A5 ("\xE6\x97" then "\x97\xA5" is not a sequence).
  int32_t e697 = -1, tail = -1;
  for (int32_t t = 257; t < vocab()->n_vocab(); ++t) {
    if (vocab()->bytes(t) == "\xE6\x97") e697 = t;
    if (vocab()->bytes(t) == "\xA9\"") tail = t;
  }
  EXPECT_FALSE(matcher(m).accept(tail));  // é then '"' after only one character
  EXPECT_TRUE(m2.accept(e697));
  expect_mask_brute_force(m2, "after C3 A9 E6 97");
  EXPECT_TRUE(m2.accept(0xA5));
  EXPECT_TRUE(m2.accept('"'));
  EXPECT_TRUE(m2.must_end());
  // Invalid UTF-8 is never produced: a lone continuation byte, an overlong form, a surrogate.
  auto any = compiled(kind::grammar, "root ::= .+");
  EXPECT_FALSE(matches(any, "\xA9"));
  EXPECT_FALSE(matches(any, "\xC0\xAF"));
  EXPECT_FALSE(matches(any, "\xED\xA0\x80"));
  EXPECT_TRUE(matches(any, "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(Constraint, ControlTokenOnlyAsTheEnd) {
  auto c = compiled(kind::regex, "ab?");
  matcher m(c);
  EXPECT_FALSE(m.accept(control_token));
  EXPECT_TRUE(m.accept('a'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  EXPECT_TRUE(m.accept(control_token));
  EXPECT_TRUE(m.must_end());
  std::vector<uint64_t> mask;
  m.allowed_tokens(mask);
  for (auto w : mask) EXPECT_EQ(w, 0u);
  EXPECT_FALSE(m.accept('b'));
}

TEST(Constraint, MaskNeverHoldsControlTokens) {
  auto c = compiled(kind::json_object, "");
  matcher m(c);
  std::vector<uint64_t> mask;
  m.allowed_tokens(mask);
  EXPECT_FALSE(bit(mask, control_token));
  EXPECT_TRUE(bit(mask, '{'));
  EXPECT_FALSE(bit(mask, '['));
}

TEST(Constraint, MasksAgreeWithFeedingEachToken) {
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "n": {"type": "integer"}, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["yes", "no"]}}},
      "required": ["name"]})";
  auto c = compiled(kind::json_schema, schema);
  const std::string doc = "{\"name\": \"a\\\"b\xC3\xA9\", \"n\": -120, \"ok\": true, \"tags\": [\"yes\", \"no\"]}";
  matcher m(c);
  for (size_t i = 0; i < doc.size(); ++i) {
    if (i % 3 == 0 || i < 12) expect_mask_brute_force(m, "prefix " + doc.substr(0, i));
    ASSERT_TRUE(m.accept(static_cast<uint8_t>(doc[i]))) << "at " << i << " of " << doc;
  }
  EXPECT_TRUE(m.must_end());
}

TEST(Constraint, MaskCacheServesRepeatedStatesAndIsBounded) {
  auto c = compiled(kind::json_schema, R"({"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]})");
  matcher m(c);
  ASSERT_TRUE(feed(m, "{\"s\": \"x"));
  std::vector<uint64_t> first, again;
  m.allowed_tokens(first);
  ASSERT_TRUE(feed(m, "yz"));  // inside the string the state repeats
  m.allowed_tokens(again);
  EXPECT_EQ(first, again);
  const auto s = stats(*c);
  EXPECT_GE(s.mask_cache_hits, 1);
  EXPECT_GE(s.mask_cache_misses, 1);
  EXPECT_LE(s.mask_cache_entries, s.mask_cache_misses);
}

TEST(Constraint, SharedAcrossThreads) {
  auto c = compiled(kind::json_object, "");
  const std::string doc = R"({"a": [1, 2, {"b": null}], "c": "d"})";
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      matcher m(c);
      std::vector<uint64_t> mask;
      for (char ch : doc) {
        m.allowed_tokens(mask);
        if (!bit(mask, static_cast<uint8_t>(ch)) || !m.accept(static_cast<uint8_t>(ch))) return;
      }
      ok[static_cast<size_t>(k)] = m.must_end() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(ok[static_cast<size_t>(k)], 1) << "thread " << k;
}

TEST(Constraint, ChoiceAndRegexKinds) {
  auto ch = compiled(kind::choice, R"(["yes", "no", "maybe"])");
  EXPECT_TRUE(matches(ch, "yes"));
  EXPECT_TRUE(matches(ch, "maybe"));
  EXPECT_FALSE(matches(ch, "ye"));
  EXPECT_FALSE(matches(ch, "yesno"));
  auto re = compiled(kind::regex, R"(\d{3}-[a-z]+)");
  EXPECT_TRUE(matches(re, "123-abc"));
  EXPECT_FALSE(matches(re, "12-abc"));
  EXPECT_FALSE(compile({kind::regex, "(a)\\1"}, vocab()).ok());
}

TEST(Constraint, RepetitionDoesNotGrowTheState) {
  // A long run of the same character keeps one state: the masks come from the cache.
  auto c = compiled(kind::grammar, "root ::= \"\\\"\" [a-z]* \"\\\"\"");
  matcher m(c);
  ASSERT_TRUE(m.accept('"'));
  std::vector<uint64_t> mask;
  for (int i = 0; i < 200; ++i) {
    m.allowed_tokens(mask);
    ASSERT_TRUE(m.accept('a'));
  }
  EXPECT_LE(stats(*c).mask_cache_misses, 2);
}

TEST(Constraint, CutStatesGiveTheSameMasksAsWholeWalks) {
  // Masks built from a cut state's cached walk plus the whole stacks' walk below the cut equal
  // the plain walk, at every step of documents that nest deeper than the cut.
  struct doc_case {
    const char* kind;
    const char* source;
    std::string doc;
  };
  const std::vector<doc_case> cases = {
      {kind::json_object, "", R"({"a": [1, 2, {"b": [null, true, "x\"y"]}], "c": {"d": {"e": {"f": "\u00e9g"}}}})"},
      {kind::json_schema,
       R"({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 6, "maxItems": 6})",
       "[1, 23, 4, 56, 7, 89]"},
      {kind::json_schema,
       R"({"type": "object", "properties": {"p": {"type": "array", "items": {"type": "object",
          "properties": {"n": {"type": "string"}, "k": {"enum": ["yes", "no"]}}, "required": ["n", "k"]}}},
          "required": ["p"]})",
       R"({"p": [{"n": "ab", "k": "yes"}, {"n": "", "k": "no"}, {"n": "abc\"", "k": "yes"}]})"},
      {kind::grammar, "root ::= item (\", \" item)*\nitem ::= \"[\" (item | [a-z]+) \"]\"", "[[[ab]]], [c], [[[[no]]]]"},
  };
  for (const auto& dc : cases) {
    auto c = compiled(dc.kind, dc.source);
    ASSERT_TRUE(c);
    matcher m(c);
    std::vector<uint64_t> fast, reference;
    for (size_t i = 0; i <= dc.doc.size(); ++i) {
      m.allowed_tokens(fast);
      m.allowed_tokens_reference(reference);
      ASSERT_EQ(fast, reference) << dc.kind << " after " << dc.doc.substr(0, i);
      if (i < dc.doc.size()) ASSERT_TRUE(m.accept(static_cast<uint8_t>(dc.doc[i]))) << dc.doc.substr(0, i + 1);
    }
    EXPECT_TRUE(m.can_end()) << dc.doc;
  }
}

TEST(Constraint, ItemsOfAFixedLengthArrayShareTheirCutWalk) {
  // Each item of a 40-item array is its own state (its position in the array differs), but the
  // top of its stacks is the same: after the first items the cut walks come from the cache.
  auto c = compiled(kind::json_schema,
                    R"({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 40, "maxItems": 40})");
  matcher m(c);
  std::string doc = "[";
  for (int i = 0; i < 40; ++i) doc += (i ? ", " : "") + std::to_string(i * 7 % 100);
  doc += "]";
  std::vector<uint64_t> mask;
  for (char ch : doc) {
    m.allowed_tokens(mask);
    ASSERT_TRUE(bit(mask, static_cast<uint8_t>(ch)));
    ASSERT_TRUE(m.accept(static_cast<uint8_t>(ch)));
  }
  EXPECT_TRUE(m.must_end());
  const auto s = stats(*c);
  EXPECT_GT(s.mask_cache_misses, 40);               // new whole states all along
  EXPECT_GT(s.cut_cache_hits, 3 * s.cut_cache_misses);  // but their cut walks repeat
}

TEST(Constraint, ClosingTokensArePrefixesOfTheShortestCompletion) {
  // The trie walk along the completion finds exactly the tokens a pass over the vocabulary would.
  auto c = compiled(kind::json_schema,
                    R"({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
                        "items": {"type": "integer"}, "minItems": 3}}, "required": ["name", "tags"]})");
  const std::string doc = R"({"name": "ab", "tags": [12, 345, 6]})";
  matcher m(c);
  std::vector<uint64_t> mask;
  int checked_nonempty = 0;
  for (size_t i = 0; i < doc.size(); ++i) {
    m.closing_tokens(mask);
    const std::string rest = m.shortest_completion();
    for (int32_t t = 0; t < vocab()->n_vocab(); ++t) {
      const std::string& b = vocab()->bytes(t);
      const bool prefix = !b.empty() && b.size() <= rest.size() && rest.compare(0, b.size(), b) == 0;
      ASSERT_EQ(bit(mask, t), prefix) << "after " << doc.substr(0, i) << ": token '" << b << "', completion '" << rest << "'";
      checked_nonempty += prefix ? 1 : 0;
    }
    ASSERT_TRUE(m.accept(static_cast<uint8_t>(doc[i])));
  }
  EXPECT_GT(checked_nonempty, static_cast<int>(doc.size()));  // multi-byte tokens were found too
}

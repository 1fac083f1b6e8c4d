// The GBNF parser: the syntax llama-server accepts, its IR, and errors that name the place.
#include "structured/gbnf.hpp"

#include <gtest/gtest.h>

#include "structured/constraint.hpp"

using namespace troupe::structured;

namespace {

std::string error_of(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_FALSE(g.ok()) << "parsed: " << text;
  return g.ok() ? "" : g.error();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Whole `text` accepted by the grammar, fed one byte token at a time (a vocabulary of the 256
// bytes, as in byte-level BPE).
bool grammar_matches(const std::string& gbnf, const std::string& text) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  static const auto vocab = std::make_shared<const token_vocabulary>(t);
  auto c = compile({kind::grammar, gbnf}, vocab);
  EXPECT_TRUE(c.ok()) << c.error() << " for " << gbnf;
  if (!c.ok()) return false;
  matcher m(c.value());
  for (char ch : text)
    if (!m.accept(static_cast<uint8_t>(ch))) return false;
  return m.can_end();
}

}  // namespace

TEST(Gbnf, ParsesRulesAlternativesAndReferences) {
  auto g = parse_gbnf("root ::= greeting \" \" name | \"hi\"\ngreeting ::= \"hello\" # a comment\nname ::= [a-z]+\n");
  ASSERT_TRUE(g.ok()) << g.error();
  const auto& root = g->rules[g->root];
  EXPECT_EQ(root.name, "root");
  ASSERT_EQ(root.alts.size(), 2u);
  ASSERT_EQ(root.alts[0].size(), 3u);
  EXPECT_EQ(root.alts[0][0].t, gbnf_symbol::type::rule);
  EXPECT_EQ(g->rules[root.alts[0][0].rule].name, "greeting");
  EXPECT_EQ(root.alts[0][1].ranges, (std::vector<code_range>{{' ', ' '}}));
  EXPECT_EQ(root.alts[1].size(), 2u);  // "hi": one symbol per character
  EXPECT_GE(g->find("name"), 0);
  EXPECT_EQ(g->find("nope"), -1);
}

// Found by fuzzing: a grammar of 400,000 nested '(' (a request body can hold one) overflowed
// the stack.
TEST(Gbnf, GroupsNestedTooDeepAreRefusedByName) {
  const std::string deep = "root ::= " + std::string(400000, '(') + "\"a\"" + std::string(400000, ')') + "\n";
  EXPECT_TRUE(contains(error_of(deep), "groups nested more than 256 deep"));
  const std::string at_limit = "root ::= " + std::string(256, '(') + "\"a\"" + std::string(256, ')') + "\n";
  EXPECT_TRUE(grammar_matches(at_limit, "a"));
}

TEST(Gbnf, LiteralEscapes) {
  auto g = parse_gbnf(R"(root ::= "\n\t\"\\\x41\u00e9\U0001F600")");
  ASSERT_TRUE(g.ok()) << g.error();
  std::vector<uint32_t> cps;
  for (const auto& s : g->rules[g->root].alts[0]) cps.push_back(s.ranges[0].lo);
  EXPECT_EQ(cps, (std::vector<uint32_t>{'\n', '\t', '"', '\\', 'A', 0xE9, 0x1F600}));
  // UTF-8 in a literal is read as code points.
  auto u = parse_gbnf("root ::= \"日本\"");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->rules[u->root].alts[0].size(), 2u);
  EXPECT_EQ(u->rules[u->root].alts[0][0].ranges[0].lo, 0x65E5u);
}

TEST(Gbnf, CharacterClassesRangesNegationAndDot) {
  auto g = parse_gbnf(R"(root ::= [a-c0-9_] [^"\\] . [\]\-])");
  ASSERT_TRUE(g.ok()) << g.error();
  const auto& a = g->rules[g->root].alts[0];
  EXPECT_EQ(a[0].ranges, (std::vector<code_range>{{'0', '9'}, {'_', '_'}, {'a', 'c'}}));
  EXPECT_EQ(a[1].ranges, (std::vector<code_range>{{0, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, max_code_point}}));
  EXPECT_EQ(a[2].ranges, (std::vector<code_range>{{0, max_code_point}}));
  EXPECT_EQ(a[3].ranges, (std::vector<code_range>{{'-', '-'}, {']', ']'}}));
}

TEST(Gbnf, RepetitionsBecomeRules) {
  auto g = parse_gbnf("root ::= \"a\"* \"b\"+ \"c\"? \"d\"{2} \"e\"{1,} \"f\"{1,3} (\"g\" | \"h\")");
  ASSERT_TRUE(g.ok()) << g.error();
  // Generated rules are named after the rule they come from.
  int generated = 0;
  for (const auto& r : g->rules)
    if (r.name.rfind("root#", 0) == 0) ++generated;
  EXPECT_GE(generated, 6);
  // {2} repeats the item in place: "d" "d".
  int d = 0;
  for (const auto& s : g->rules[g->root].alts[0])
    if (s.t == gbnf_symbol::type::chars && s.ranges[0].lo == 'd') ++d;
  EXPECT_EQ(d, 2);
}

TEST(Gbnf, MultiLineRulesInGroupsAndLeadingBars) {
  auto g = parse_gbnf("root ::= (\n  \"a\"\n  | \"b\"\n) x\n  | \"c\"\nx ::= \"x\"\n");
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_EQ(g->rules[g->root].alts.size(), 2u);
}

TEST(Gbnf, SyntaxErrorsNameLineAndColumn) {
  auto e = error_of("root ::= \"a\"\nfoo = \"b\"");
  EXPECT_TRUE(contains(e, "line 2 column 5")) << e;
  EXPECT_TRUE(contains(e, "expected '::='")) << e;
  e = error_of("root ::= \"abc");
  EXPECT_TRUE(contains(e, "unterminated string literal")) << e;
  e = error_of("root ::= [a-z");
  EXPECT_TRUE(contains(e, "unterminated character class")) << e;
  e = error_of("root ::= (\"a\" | \"b\"");
  EXPECT_TRUE(contains(e, "expected ')'")) << e;
  e = error_of("root ::= \"a\"{3,1}");
  EXPECT_TRUE(contains(e, "max below min")) << e;
  e = error_of("root ::= * \"a\"");
  EXPECT_TRUE(contains(e, "must follow something")) << e;
  e = error_of("root ::= \"\\q\"");
  EXPECT_TRUE(contains(e, "unknown escape '\\q'")) << e;
  e = error_of("root ::= [z-a]");
  EXPECT_TRUE(contains(e, "reversed")) << e;
  e = error_of("root ::= \"a\"{5000}");
  EXPECT_TRUE(contains(e, "above 1000")) << e;
}

TEST(Gbnf, UndefinedDuplicateAndMissingRoot) {
  auto e = error_of("root ::= item\n");
  EXPECT_TRUE(contains(e, "undefined rule 'item'")) << e;
  EXPECT_TRUE(contains(e, "line 1 column 10")) << e;
  e = error_of("root ::= \"a\"\nroot ::= \"b\"\n");
  EXPECT_TRUE(contains(e, "rule 'root' is defined twice")) << e;
  e = error_of("start ::= \"a\"\n");
  EXPECT_TRUE(contains(e, "no rule 'root'")) << e;
  EXPECT_TRUE(parse_gbnf("start ::= \"a\"\n", "start").ok());
}

TEST(Gbnf, LeftRecursionIsRefusedByName) {
  auto e = error_of("root ::= root \"a\" | \"b\"\n");
  EXPECT_TRUE(contains(e, "left recursion")) << e;
  EXPECT_TRUE(contains(e, "'root'")) << e;
  e = error_of("root ::= a\na ::= b \"x\"\nb ::= a \"y\" | \"z\"\n");
  EXPECT_TRUE(contains(e, "left recursion")) << e;
  EXPECT_TRUE(contains(e, "'a'") && contains(e, "'b'")) << e;
  // Through a rule that may match nothing.
  e = error_of("root ::= opt root \"a\" | \"b\"\nopt ::= \"x\"?\n");
  EXPECT_TRUE(contains(e, "left recursion")) << e;
  // Recursion after a first character is fine.
  EXPECT_TRUE(parse_gbnf("root ::= \"(\" root \")\" | \"x\"\n").ok());
}

TEST(Gbnf, RepetitionOfWhatMayMatchNothingIsNoLeftRecursion) {
  // `R ::= X R |` over a nullable X once read as R -> X -> "" -> R; llama.cpp accepts these.
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, bool>>>> cases = {
      {R"(root ::= ("a"?)*)", {{"", true}, {"a", true}, {"aaa", true}, {"b", false}}},
      {R"(root ::= ("a" | )+)", {{"", true}, {"aa", true}, {"ab", false}}},
      {R"(root ::= "x" ("a"*)+ "y")", {{"xy", true}, {"xaay", true}, {"x", false}, {"xay y", false}}},
      {R"(root ::= ("a"? "b"?){2,} "c")", {{"c", true}, {"abbac", true}, {"bbbc", true}, {"ca", false}}},
      {R"(root ::= (("a"?)* "b"?)* "!")", {{"!", true}, {"aab!", true}, {"babb!", true}, {"c!", false}}},
      {"root ::= item* \".\"\nitem ::= \"k\" | opt\nopt ::= \"v\"?\n", {{".", true}, {"kvvk.", true}, {"kx.", false}}},
      {R"(root ::= ()* "z")", {{"z", true}, {"", false}}},
      // X* in a rule that X reaches again, as a nested list: the copy made of R stays fine.
      {"root ::= \"[\" (root? \",\"?)* \"]\"\n", {{"[]", true}, {"[[],[[]]]", true}, {"[,,]", true}, {"[", false}}},
  };
  for (const auto& [gbnf, samples] : cases) {
    auto g = parse_gbnf(gbnf);
    ASSERT_TRUE(g.ok()) << gbnf << ": " << g.error();
    for (const auto& [text, ok] : samples) EXPECT_EQ(grammar_matches(gbnf, text), ok) << gbnf << " on '" << text << "'";
  }
  // A user's own left recursion through a repetition is still refused by name.
  auto e = error_of("root ::= (root? \"a\"?)* \"b\" | \"c\"\n");
  EXPECT_TRUE(contains(e, "left recursion: 'root'")) << e;
  e = error_of("a ::= b*\nb ::= a* \"x\"?\nroot ::= a\n");
  EXPECT_TRUE(contains(e, "left recursion")) << e;
}

TEST(Gbnf, RuleThatCanNeverFinishIsRefused) {
  auto e = error_of("root ::= \"a\" loop\nloop ::= \"b\" loop\n");
  EXPECT_TRUE(contains(e, "'loop' can never finish")) << e;
}

TEST(Gbnf, LiteralAndClassWritersRoundTrip) {
  const std::string text = "say \"hi\"\\\n\t\x01 é";
  auto g = parse_gbnf("root ::= " + gbnf_literal(text));
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_EQ(g->rules[g->root].alts[0].size(), 14u);  // é is one code point
  const std::vector<code_range> cls = {{0, 0x1F}, {'"', '"'}, {'-', '-'}, {'\\', ']'}, {0xE9, 0xE9}};
  auto c = parse_gbnf("root ::= " + gbnf_class(cls));
  ASSERT_TRUE(c.ok()) << c.error() << " for " << gbnf_class(cls);
  EXPECT_EQ(c->rules[c->root].alts[0][0].ranges, cls);
}

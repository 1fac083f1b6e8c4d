// Regex -> GBNF translation and the choice kind: the translated grammar parses and the matcher
// accepts exactly what the regex does (checked against std::regex on sample strings).
#include "structured/regex.hpp"

#include <gtest/gtest.h>

#include <regex>

#include "structured/constraint.hpp"
#include "structured/gbnf.hpp"

using namespace troupe::structured;

namespace {

std::shared_ptr<const token_vocabulary> byte_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  static auto v = std::make_shared<const token_vocabulary>(t);
  return v;
}

bool grammar_matches(const std::string& gbnf_expr, const std::string& text) {
  auto c = compile({kind::grammar, "root ::= " + gbnf_expr + "\n"}, byte_vocab());
  EXPECT_TRUE(c.ok()) << c.error() << " for " << gbnf_expr;
  if (!c.ok()) return false;
  matcher m(c.value());
  for (char ch : text)
    if (!m.accept(static_cast<uint8_t>(ch))) return false;
  return m.can_end();
}

std::string error_of(const std::string& pattern) {
  auto r = regex_to_gbnf(pattern);
  EXPECT_FALSE(r.ok()) << pattern << " -> " << (r.ok() ? r.value() : "");
  return r.ok() ? "" : r.error();
}

}  // namespace

TEST(Regex, AgreesWithStdRegexOnSamples) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"(^\d{3}-\d{4}$)", {"555-1234", "55-1234", "555-12345", "abc-defg", ""}},
      {R"([A-Z][a-z]+ (apples|pears))", {"Tom apples", "Tom pear", "tom apples", "T apples", "Anna pears"}},
      {R"((?:ab)+c?)", {"ab", "ababc", "abc", "a", "c", "abab"}},
      {R"(\w+@\w+\.(com|org))", {"a@b.com", "x_1@y.org", "a@b.net", "@b.com"}},
      {R"([^a-z]{2,3})", {"AB", "A", "ABCD", "12", "aB"}},
      {R"(a.c)", {"abc", "a c", "a\nc", "ac"}},
      {R"(x*?y+?z??)", {"y", "xxyyz", "z", "xx"}},
      {R"([\d\s]+)", {"1 2\t3", "12a", " "}},
      {R"(colou?r|gr[ae]y)", {"color", "colour", "grey", "gray", "grwy"}},
      {R"(\.\*\+\?)", {".*+?", "a*+?"}},
      // A repeated group that may match nothing (was refused as left recursion).
      {R"((a?)*)", {"", "a", "aaa", "b", "ab"}},
      {R"((a|)+)", {"", "a", "aa", "ba"}},
      {R"(x(a*)+y)", {"xy", "xay", "xaaay", "x", "xa", "xby"}},
      {R"(((a?)*b?){2,}c)", {"c", "abc", "babac", "ca"}},
  };
  for (const auto& [pattern, samples] : cases) {
    auto g = regex_to_gbnf(pattern);
    ASSERT_TRUE(g.ok()) << pattern << ": " << g.error();
    const std::regex re(pattern);
    for (const auto& s : samples)
      EXPECT_EQ(grammar_matches(g.value(), s), std::regex_match(s, re)) << pattern << " on '" << s << "' via " << g.value();
  }
}

TEST(Regex, RefusesWhatAGrammarCannotDoByName) {
  EXPECT_NE(error_of(R"((a)\1)").find("backreferences"), std::string::npos);
  EXPECT_NE(error_of(R"(a(?=b))").find("lookahead"), std::string::npos);
  EXPECT_NE(error_of(R"((?<!a)b)").find("lookbehind"), std::string::npos);
  EXPECT_NE(error_of(R"(\bword)").find("word boundary"), std::string::npos);
  EXPECT_NE(error_of(R"(a++)").find("possessive"), std::string::npos);
  EXPECT_NE(error_of(R"((?i)abc)").find("inline flags"), std::string::npos);
  EXPECT_NE(error_of(R"(a^b)").find("'^'"), std::string::npos);
  EXPECT_NE(error_of(R"((ab)").find("unbalanced '('"), std::string::npos);
  EXPECT_NE(error_of(R"([abc)").find("unterminated character class"), std::string::npos);
  const auto e = error_of(R"(abc\1)");
  EXPECT_NE(e.find("offset 3"), std::string::npos) << e;
}

// Found by fuzzing: 300,000 nested '(' (a request body can hold them) overflowed the stack.
TEST(Regex, GroupsNestedTooDeepAreRefusedByName) {
  const std::string deep = std::string(300000, '(') + "a" + std::string(300000, ')');
  EXPECT_NE(error_of(deep).find("nested more than 100 deep"), std::string::npos);
  // At the bound the pattern still works, and its grammar (nested up to twice as deep) parses.
  const std::string at_limit = std::string(100, '(') + "a|b" + std::string(100, ')');
  auto g = regex_to_gbnf(at_limit);
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_TRUE(grammar_matches(g.value(), "b"));
  EXPECT_FALSE(grammar_matches(g.value(), "c"));
}

TEST(Regex, NamedGroupsAreGroups) {
  auto g = regex_to_gbnf(R"((?P<year>\d{4})-(?<month>\d{2}))");
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_TRUE(grammar_matches(g.value(), "2024-05"));
  EXPECT_FALSE(grammar_matches(g.value(), "2024-5"));
}

TEST(Regex, InsideAJsonStringSpecialsAreEscaped) {
  // The pattern matches the decoded string; the grammar matches its JSON encoding.
  auto g = regex_to_gbnf(R"(a"b\\c[^x]?)", true);
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_TRUE(grammar_matches(g.value(), R"(a\"b\\c)"));
  EXPECT_TRUE(grammar_matches(g.value(), R"(a\"b\\c\")"));  // [^x] holds '"', escaped
  EXPECT_TRUE(grammar_matches(g.value(), R"(a\"b\\c\n)"));
  EXPECT_FALSE(grammar_matches(g.value(), "a\"b\\\\c"));     // a raw quote would end the string
  EXPECT_FALSE(grammar_matches(g.value(), "a\\\"b\\\\c\n"));  // a raw newline is not JSON
}

TEST(Choice, ListOfStringsBecomesAlternatives) {
  auto g = choice_to_gbnf(R"(["red", "dark \"blue\"", "绿"])");
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_TRUE(grammar_matches(g.value(), "red"));
  EXPECT_TRUE(grammar_matches(g.value(), "dark \"blue\""));
  EXPECT_TRUE(grammar_matches(g.value(), "绿"));
  EXPECT_FALSE(grammar_matches(g.value(), "re"));
  EXPECT_FALSE(grammar_matches(g.value(), "redd"));
}

TEST(Choice, BadListsAreNamed) {
  EXPECT_NE(choice_to_gbnf("[]").error().find("empty"), std::string::npos);
  EXPECT_NE(choice_to_gbnf(R"(["a", 1])").error().find("element 1 is not a string"), std::string::npos);
  EXPECT_NE(choice_to_gbnf(R"({"a": 1})").error().find("JSON array of strings"), std::string::npos);
  EXPECT_NE(choice_to_gbnf("[\"a\"").error().find("not valid JSON"), std::string::npos);
}

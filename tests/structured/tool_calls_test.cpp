// structured/tool_calls: the prompt texts of each format, and the parser reading calls out of
// generated text as it streams — split at every byte, the deltas add up to the same calls.
#include "structured/tool_calls.hpp"

#include <gtest/gtest.h>

#include <string>

#include "structured/constraint.hpp"

using namespace troupe::structured;

namespace {

struct collected {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> args;
};

void add(collected& c, const std::vector<tool_call_parser::delta>& ds) {
  for (const auto& d : ds) {
    if (d.call < 0) {
      c.content += d.content;
      continue;
    }
    ASSERT_TRUE(d.content.empty());
    if (static_cast<size_t>(d.call) >= c.names.size()) {
      ASSERT_EQ(static_cast<size_t>(d.call), c.names.size()) << "calls arrive in order";
      ASSERT_FALSE(d.name.empty()) << "a call's first delta names it";
      c.names.push_back(d.name);
      c.args.emplace_back();
    } else {
      EXPECT_TRUE(d.name.empty()) << "the name is sent once";
    }
    c.args[static_cast<size_t>(d.call)] += d.arguments;
  }
}

collected parse_in_pieces(tool_format f, const std::string& text, size_t piece, bool forced = false,
                          const std::string& forced_name = {}, const std::vector<std::string>& known = {}) {
  tool_call_parser p(f, forced, forced_name, known);
  collected c;
  for (size_t i = 0; i < text.size(); i += piece) add(c, p.push(text.substr(i, piece)));
  add(c, p.finish());
  EXPECT_EQ(p.calls().size(), c.names.size());
  for (size_t i = 0; i < p.calls().size() && i < c.names.size(); ++i) {
    EXPECT_EQ(p.calls()[i].name, c.names[i]);
    EXPECT_EQ(p.calls()[i].arguments, c.args[i]) << "the streamed pieces add up to the call's arguments";
  }
  return c;
}

}  // namespace

TEST(ToolCallParser, HermesCallsAtEveryPieceSize) {
  const std::string text =
      "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET \\\"x\\\" }\"}}\n</tool_call>";
  for (size_t piece : {1, 2, 3, 5, 7, 13, 1000}) {
    auto c = parse_in_pieces(tool_format::hermes, text, piece);
    EXPECT_EQ(c.content, "Let me check.") << piece;
    ASSERT_EQ(c.names.size(), 2u) << piece;
    EXPECT_EQ(c.names[0], "get_weather");
    EXPECT_EQ(c.args[0], "{\"city\": \"Paris\", \"days\": [1, 2]}");
    EXPECT_EQ(c.names[1], "get_time");
    EXPECT_EQ(c.args[1], "{\"tz\": \"CET \\\"x\\\" }\"}") << "braces inside strings do not end the arguments";
  }
}

TEST(ToolCallParser, PlainTextIsContentAndAMarkerPrefixIsHeldBackOnlyUntilDecided) {
  tool_call_parser p(tool_format::hermes);
  auto d = p.push("a < b and <tool");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].content, "a < b and ") << "the possible start of a marker waits";
  d = p.push("box>");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].content, "<toolbox>");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_TRUE(p.calls().empty());
}

TEST(ToolCallParser, BrokenCallWithoutNameIsContent) {
  auto c = parse_in_pieces(tool_format::hermes, "<tool_call>\nnot json\n</tool_call>", 4);
  EXPECT_TRUE(c.names.empty());
  EXPECT_EQ(c.content, "<tool_call>\nnot json\n</tool_call>");
}

TEST(ToolCallParser, UnfinishedCallAtTheEndKeepsItsNameAndArgumentsSoFar) {
  auto c = parse_in_pieces(tool_format::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", 3);
  ASSERT_EQ(c.names.size(), 1u);
  EXPECT_EQ(c.names[0], "f");
  EXPECT_EQ(c.args[0], "{\"a\": 1");
}

// A forced call (tool_choice required / a named function) cut short by max_tokens before its
// name: no markup comes back as content (it used to: "<tool_"), and a named tool_choice gives
// its call with arguments "" (OpenAI answers a cut forced call with the call, finish "length").
TEST(ToolCallParser, AForcedCallCutBeforeItsNameIsNoContent) {
  for (size_t piece : {1, 3, 1000}) {
    for (const std::string cut : {"", "  ", "<tool_", "<tool_call>\n", "<tool_call>\n{\"na", "<tool_call>\n{\"name\": \"get_w"}) {
      auto named = parse_in_pieces(tool_format::hermes, cut, piece, true, "get_weather");
      EXPECT_EQ(named.content, "") << cut;
      ASSERT_EQ(named.names.size(), 1u) << cut;
      EXPECT_EQ(named.names[0], "get_weather");
      EXPECT_EQ(named.args[0], "");
      auto required = parse_in_pieces(tool_format::hermes, cut, piece, true);
      EXPECT_EQ(required.content, "") << cut;
      EXPECT_TRUE(required.names.empty()) << cut;
    }
    for (auto f : {tool_format::llama3, tool_format::mistral}) {
      auto named = parse_in_pieces(f, f == tool_format::llama3 ? "{\"name\": \"get" : "[TOOL_CA", piece, true, "get_weather");
      EXPECT_EQ(named.content, "");
      ASSERT_EQ(named.names.size(), 1u);
      EXPECT_EQ(named.names[0], "get_weather");
    }
    // Cut right after the name: the call, its arguments "" (not "{}": none were written).
    auto named_only = parse_in_pieces(tool_format::hermes, "<tool_call>\n{\"name\": \"f\", \"argu", piece, true, "f");
    ASSERT_EQ(named_only.names.size(), 1u);
    EXPECT_EQ(named_only.args[0], "");
    // Cut after the name: the name and the arguments so far, as without `forced`.
    auto late = parse_in_pieces(tool_format::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", piece, true, "f");
    ASSERT_EQ(late.names.size(), 1u);
    EXPECT_EQ(late.args[0], "{\"a\": 1");
    EXPECT_EQ(late.content, "");
  }
  // Not forced: unchanged, what was written is content.
  EXPECT_EQ(parse_in_pieces(tool_format::hermes, "<tool_", 2).content, "<tool_");
}

// SmolLM2 asked to "always call a tool" and given "<tool_call> weather London" called a function
// named "weather London" (not offered, not even a name); an agent loop would have dispatched it.
TEST(ToolCallParser, ACallOfAFunctionNotOfferedIsContent) {
  const std::vector<std::string> offered = {"get_weather", "get_time"};
  const std::string made_up = "<tool_call>\n{\"name\": \"weather London\", \"arguments\": {\"city\": \"London\"}}\n</tool_call>";
  for (size_t piece : {1, 2, 3, 5, 7, 13, 1000}) {
    auto c = parse_in_pieces(tool_format::hermes, "Sure. " + made_up, piece, false, {}, offered);
    EXPECT_TRUE(c.names.empty()) << piece << ": no name delta goes out for it";
    EXPECT_EQ(c.content, "Sure. " + made_up) << piece << ": the markup as written";
    // Without the offered names (as before): any name is a call.
    auto any = parse_in_pieces(tool_format::hermes, made_up, piece);
    ASSERT_EQ(any.names.size(), 1u) << piece;
    EXPECT_EQ(any.names[0], "weather London");
    // Cut short (max_tokens) inside it: what was written is content.
    const std::string cut = "<tool_call>\n{\"name\": \"weather London\", \"argu";
    auto cut_c = parse_in_pieces(tool_format::hermes, cut, piece, false, {}, offered);
    EXPECT_TRUE(cut_c.names.empty()) << piece;
    EXPECT_EQ(cut_c.content, cut) << piece;
    // Between offered calls it takes no call number, and its markup (with the whitespace before
    // it) is content; the calls around it stand.
    const std::string mixed =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n" + made_up +
        "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    auto m = parse_in_pieces(tool_format::hermes, mixed, piece, false, {}, offered);
    ASSERT_EQ(m.names.size(), 2u) << piece;
    EXPECT_EQ(m.names[0], "get_weather");
    EXPECT_EQ(m.args[0], "{\"city\": \"Oslo\"}");
    EXPECT_EQ(m.names[1], "get_time");
    EXPECT_EQ(m.args[1], "{}");
    EXPECT_EQ(m.content, "\n" + made_up) << piece;
    // A name prefixing an offered one is not it.
    auto prefix = parse_in_pieces(tool_format::hermes, "<tool_call>\n{\"name\": \"get_\"}\n</tool_call>", piece, false, {}, offered);
    EXPECT_TRUE(prefix.names.empty()) << piece;
  }
  for (size_t piece : {1, 3, 1000}) {
    const std::string l3 = "{\"name\": \"weather London\", \"parameters\": {}}";
    auto l = parse_in_pieces(tool_format::llama3, l3, piece, false, {}, offered);
    EXPECT_TRUE(l.names.empty());
    EXPECT_EQ(l.content, l3);
    auto l_ok = parse_in_pieces(tool_format::llama3, "{\"name\": \"get_time\", \"parameters\": {}}", piece, false, {}, offered);
    ASSERT_EQ(l_ok.names.size(), 1u);
    EXPECT_EQ(l_ok.names[0], "get_time");
    // mistral: the calls share one array; one name not offered and the reply is no call.
    const std::string mi = "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"rm\", \"arguments\": {}}]";
    auto m = parse_in_pieces(tool_format::mistral, mi, piece, false, {}, offered);
    EXPECT_TRUE(m.names.empty());
    EXPECT_EQ(m.content, mi);
    auto m_ok = parse_in_pieces(tool_format::mistral, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]", piece, false, {}, offered);
    ASSERT_EQ(m_ok.names.size(), 1u);
  }
  // Forced: the grammar picks among the offered names, and nothing is content; unchanged.
  auto forced = parse_in_pieces(tool_format::hermes, "<tool_call>\n{\"name\": \"get_", 2, true, "get_time", offered);
  EXPECT_EQ(forced.content, "");
  ASSERT_EQ(forced.names.size(), 1u);
  EXPECT_EQ(forced.names[0], "get_time");
}

TEST(ToolCallParser, ArgumentsBeforeNameAreSentWhole) {
  auto c = parse_in_pieces(tool_format::hermes, "<tool_call>{\"arguments\": {\"x\": [1]}, \"name\": \"g\"}</tool_call>", 2);
  ASSERT_EQ(c.names.size(), 1u);
  EXPECT_EQ(c.names[0], "g");
  EXPECT_EQ(c.args[0], "{\"x\": [1]}");
}

TEST(ToolCallParser, Llama3AndMistralReadTheWholeReply) {
  auto l = parse_in_pieces(tool_format::llama3, "{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}", 3);
  ASSERT_EQ(l.names.size(), 1u);
  EXPECT_EQ(l.names[0], "f");
  EXPECT_EQ(l.args[0], "{\"a\":\"b\"}");
  EXPECT_EQ(l.content, "");
  auto plain = parse_in_pieces(tool_format::llama3, "Hello {there}", 3);
  EXPECT_TRUE(plain.names.empty());
  EXPECT_EQ(plain.content, "Hello {there}");
  auto m = parse_in_pieces(tool_format::mistral,
                           "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"k\": 1}}]", 5);
  ASSERT_EQ(m.names.size(), 2u);
  EXPECT_EQ(m.names[1], "b");
  EXPECT_EQ(m.args[1], "{\"k\":1}");
}

TEST(ToolPrompt, HermesTextsAreWhatQwenStyleTemplatesWrite) {
  std::vector<tool_def> tools = {{"get_weather", "Weather \"now\"", R"({"type":"object","properties":{"city":{"type":"string"}}})"}};
  const auto p = tools_prompt(tool_format::hermes, tools);
  EXPECT_NE(p.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                   "\"Weather \\\"now\\\"\", \"parameters\": {\"type\":\"object\""),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<tool_call></tool_call>"), std::string::npos);
  EXPECT_EQ(calls_text(tool_format::hermes, {{"f", "{\"a\":1}"}}),
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call>");
  EXPECT_EQ(tool_result_text(tool_format::hermes, "22C"), "<tool_response>\n22C\n</tool_response>");
  EXPECT_STREQ(tool_result_role(tool_format::hermes), "user");
  EXPECT_STREQ(tool_result_role(tool_format::llama3), "ipython");
}

TEST(ToolGrammar, ForcedCallsNameTheFunctionAndRefuseAnUnknownOne) {
  std::vector<tool_def> tools = {{"f", "", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"},
                                 {"g", "", ""}};
  auto one = calls_grammar(tool_format::hermes, tools, "f");
  ASSERT_TRUE(one) << one.error();
  EXPECT_NE(one->find("root ::="), std::string::npos);
  EXPECT_EQ(one->find("fn1"), std::string::npos) << "only the named function";
  auto any = calls_grammar(tool_format::hermes, tools, "");
  ASSERT_TRUE(any) << any.error();
  EXPECT_NE(any->find("fn1"), std::string::npos);
  auto none = calls_grammar(tool_format::hermes, tools, "h");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().find("'h'"), std::string::npos);
}

namespace {

// A vocabulary whose token i is the byte i: the matcher then accepts exactly a grammar's sentences.
std::shared_ptr<const token_vocabulary> byte_vocabulary() {
  std::vector<std::string> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = std::string(1, static_cast<char>(i));
  return std::make_shared<const token_vocabulary>(std::move(bytes));
}

bool grammar_accepts(const std::string& gbnf, const std::string& text) {
  auto c = compile({kind::grammar, gbnf}, byte_vocabulary());
  EXPECT_TRUE(c) << (c ? "" : c.error());
  if (!c) return false;
  matcher m(*c);
  for (unsigned char b : text)
    if (!m.accept(b)) return false;
  return m.can_end();
}

}  // namespace

TEST(ToolGrammar, AcceptsWhatTheModelWouldWriteAndNothingElse) {
  std::vector<tool_def> tools = {{"f", "", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"},
                                 {"g", "", ""}};
  auto g = calls_grammar(tool_format::hermes, tools, "");
  ASSERT_TRUE(g) << g.error();
  EXPECT_TRUE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"f", "{\"a\": 12}"}})));
  EXPECT_TRUE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"g", "{}"}})));
  EXPECT_FALSE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"f", "{\"a\": \"x\"}"}}))) << "a is an integer";
  EXPECT_FALSE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"h", "{}"}}))) << "no such function";
  auto named = calls_grammar(tool_format::hermes, tools, "g");
  ASSERT_TRUE(named);
  EXPECT_FALSE(grammar_accepts(*named, calls_text(tool_format::hermes, {{"f", "{\"a\": 1}"}})));
  auto l3 = calls_grammar(tool_format::llama3, tools, "f");
  ASSERT_TRUE(l3) << l3.error();
  EXPECT_TRUE(grammar_accepts(*l3, calls_text(tool_format::llama3, {{"f", "{\"a\": 1}"}})));
  auto mi = calls_grammar(tool_format::mistral, tools, "", true);
  ASSERT_TRUE(mi) << mi.error();
  EXPECT_TRUE(grammar_accepts(*mi, calls_text(tool_format::mistral, {{"f", "{\"a\": 1}"}, {"g", "{}"}})));
}

// A call's arguments are an object whatever the schema leaves open: `{}` and a schema of only a
// description constrain an object (openai-agents sent `{}` and got arguments "0").
TEST(ToolGrammar, ArgumentsAreAnObjectWhenTheSchemaHasNoType) {
  for (const std::string params : {"{}", " { } ", R"({"description": "x"})", R"({"properties": {"a": {"type": "integer"}}})"}) {
    auto g = calls_grammar(tool_format::hermes, {{"w", "", params}}, "w");
    ASSERT_TRUE(g) << params << ": " << g.error();
    EXPECT_TRUE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"w", "{}"}}))) << params;
    EXPECT_TRUE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"w", "{\"a\": 1}"}}))) << params;
    for (const char* not_object : {"0", "\"x\"", "[]", "null", "true"})
      EXPECT_FALSE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"w", not_object}}))) << params << " " << not_object;
  }
}

// tool_choice "auto" with a strict function: any text that does not hold the call marker, then
// optionally calls, the strict function's arguments held to its schema, the others' to an object.
TEST(ToolGrammar, AutoWithAStrictFunctionIsFreeTextOrCallsThatKeepTheSchema) {
  std::vector<tool_def> tools = {
      {"f", "", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false})",
       true},
      {"g", "", R"({"type":"object","properties":{"b":{"type":"integer"}}})", false}};
  auto g = auto_calls_grammar(tool_format::hermes, tools);
  ASSERT_TRUE(g) << g.error();
  for (const std::string text : {"", "Hello there.", "a < b, <tool, <tool_cal> and <<tool_call", "<", "x <tool_call",
                                 "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93 </tool_call>"})
    EXPECT_TRUE(grammar_accepts(*g, text)) << text;
  const std::string good = calls_text(tool_format::hermes, {{"f", "{\"a\": 12}"}});
  EXPECT_TRUE(grammar_accepts(*g, good));
  EXPECT_TRUE(grammar_accepts(*g, "Let me look that up.\n" + good));
  EXPECT_TRUE(grammar_accepts(*g, "<to" + good)) << "a partial marker, then a call";
  EXPECT_TRUE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"f", "{\"a\": 1}"}, {"g", "{\"b\": \"any\"}"}})))
      << "g is not strict: any object";
  EXPECT_FALSE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"f", "{\"a\": \"oops\"}"}}))) << "a is an integer";
  EXPECT_FALSE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"f", "{\"a\": 1, \"zzz\": 1}"}})))
      << "no other keys";
  EXPECT_FALSE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"g", "[]"}}))) << "arguments are an object";
  EXPECT_FALSE(grammar_accepts(*g, "<tool_call>\nnot json\n</tool_call>")) << "the marker only opens a call";
  EXPECT_FALSE(grammar_accepts(*g, good + "\nand some text after")) << "nothing after the calls";

  // parallel_tool_calls false: one call at most.
  auto one = auto_calls_grammar(tool_format::hermes, tools, false);
  ASSERT_TRUE(one) << one.error();
  EXPECT_TRUE(grammar_accepts(*one, "Sure.\n" + good));
  EXPECT_TRUE(grammar_accepts(*one, "No call needed."));
  EXPECT_TRUE(grammar_accepts(*one, calls_text(tool_format::hermes, {{"g", "{\"b\": \"any\"}"}})));
  EXPECT_FALSE(grammar_accepts(*one, calls_text(tool_format::hermes, {{"f", "{\"a\": 1}"}, {"g", "{\"b\": 2}"}})))
      << "a second call";
  EXPECT_TRUE(grammar_accepts(*g, calls_text(tool_format::hermes, {{"f", "{\"a\": 1}"}, {"g", "{\"b\": 2}"}})));

  EXPECT_FALSE(auto_calls_constrainable(tool_format::llama3));
  auto l3 = auto_calls_grammar(tool_format::llama3, tools);
  ASSERT_FALSE(l3);
  EXPECT_NE(l3.error().find("llama3"), std::string::npos) << l3.error();
}

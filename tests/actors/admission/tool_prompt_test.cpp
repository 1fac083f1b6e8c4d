// actors/admission/tool_prompt: the conversation a chat template renders when tools are offered,
// called and answered, and the grammar a forced call gets.
#include "actors/admission/tool_prompt.hpp"

#include <gtest/gtest.h>

using namespace troupe;
using namespace troupe::actors;

namespace {

request_spec weather_request() {
  request_spec s;
  s.messages = {{"system", "Be brief.", {}, {}, {}}, {"user", "Weather in Paris?", {}, {}, {}}};
  s.tools = {{"get_weather", "Current weather", R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"}};
  return s;
}

}  // namespace

TEST(ToolPrompt, OffersTheToolsInTheSystemTurn) {
  auto tp = make_tool_prompt(weather_request(), structured::tool_format::hermes);
  ASSERT_TRUE(tp) << tp.error();
  ASSERT_EQ(tp->messages.size(), 2u);
  EXPECT_EQ(tp->messages[0].role, "system");
  EXPECT_EQ(tp->messages[0].content.rfind("Be brief.\n\n# Tools", 0), 0u) << tp->messages[0].content;
  EXPECT_NE(tp->messages[0].content.find("\"name\": \"get_weather\""), std::string::npos);
  EXPECT_TRUE(tp->constraint.empty()) << "auto: the model decides, nothing forced";
}

TEST(ToolPrompt, WithoutASystemTurnOneIsAdded) {
  auto s = weather_request();
  s.messages.erase(s.messages.begin());
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp);
  ASSERT_EQ(tp->messages.size(), 2u);
  EXPECT_EQ(tp->messages[0].role, "system");
  EXPECT_EQ(tp->messages[0].content.rfind("# Tools", 0), 0u);
}

TEST(ToolPrompt, NoneOffersNothingButStillRendersEarlierCalls) {
  auto s = weather_request();
  s.tool_choice = tool_choice::none;
  s.messages.push_back({"assistant", "", {{"call_1", "get_weather", R"({"city":"Paris"})"}}, {}, {}});
  s.messages.push_back({"tool", "18C and sunny", {}, "call_1", "get_weather"});
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp) << tp.error();
  ASSERT_EQ(tp->messages.size(), 4u);
  EXPECT_EQ(tp->messages[0].content, "Be brief.") << "tools not offered with none";
  EXPECT_EQ(tp->messages[2].role, "assistant");
  EXPECT_EQ(tp->messages[2].content, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>");
  EXPECT_EQ(tp->messages[3].role, "user");
  EXPECT_EQ(tp->messages[3].content, "<tool_response>\n18C and sunny\n</tool_response>");
}

TEST(ToolPrompt, ConsecutiveToolResultsAreOneTurn) {
  auto s = weather_request();
  s.messages.push_back({"assistant", "", {{"a", "get_weather", "{}"}, {"b", "get_weather", "{}"}}, {}, {}});
  s.messages.push_back({"tool", "one", {}, "a", {}});
  s.messages.push_back({"tool", "two", {}, "b", {}});
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp);
  ASSERT_EQ(tp->messages.size(), 4u);
  EXPECT_EQ(tp->messages[3].content, "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>");
}

TEST(ToolPrompt, RequiredAndNamedChoicesForceAGrammar) {
  auto s = weather_request();
  s.tool_choice = tool_choice::required;
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp) << tp.error();
  EXPECT_EQ(tp->constraint.kind, structured::kind::grammar);
  EXPECT_NE(tp->constraint.source.find("get_weather"), std::string::npos);
  s.tool_choice = tool_choice::function;
  s.tool_choice_name = "nope";
  auto bad = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("'nope'"), std::string::npos);
}

// OpenAI's `strict`: the arguments follow the schema under "auto" too, so the reply gets the
// grammar of free text or calls; without a strict function, or where a structured output holds
// the reply already, the model's text stays unconstrained by tools.
TEST(ToolPrompt, AStrictFunctionUnderAutoHoldsTheReplyToTextOrCalls) {
  auto s = weather_request();
  s.tools[0].strict = true;
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp) << tp.error();
  EXPECT_EQ(tp->constraint.kind, structured::kind::grammar);
  EXPECT_NE(tp->constraint.source.find("root ::= free0 calls?"), std::string::npos) << tp->constraint.source;
  EXPECT_NE(tp->constraint.source.find("get_weather"), std::string::npos);

  auto with_format = s;
  with_format.constraint = {structured::kind::json_object, ""};
  auto wf = make_tool_prompt(with_format, structured::tool_format::hermes);
  ASSERT_TRUE(wf) << wf.error();
  EXPECT_TRUE(wf->constraint.empty()) << "the structured output's own constraint stays";

  auto bad = s;
  bad.tools[0].parameters = R"({"type":"object","properties":{"city":{"type":"string","contentEncoding":"base64"}}})";
  auto e = make_tool_prompt(bad, structured::tool_format::hermes);
  ASSERT_FALSE(e) << "a strict schema outside the supported subset is refused, as under \"required\"";
  EXPECT_NE(e.error().find("get_weather"), std::string::npos) << e.error();

  auto l3 = make_tool_prompt(s, structured::tool_format::llama3);
  ASSERT_FALSE(l3) << "llama3's calls are bare JSON: strict under auto is refused by name";
  EXPECT_NE(l3.error().find("strict"), std::string::npos) << l3.error();
}

// OpenAI's `parallel_tool_calls: false` (LlamaIndex and LangChain send it by default): at most one
// call. A forced call is one call anyway; under "auto" the reply is held to text, then one call.
TEST(ToolPrompt, ParallelToolCallsFalseAllowsOneCall) {
  auto s = weather_request();
  s.parallel_tool_calls = false;
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp) << tp.error();
  ASSERT_EQ(tp->constraint.kind, structured::kind::grammar);
  EXPECT_NE(tp->constraint.source.find("root ::= free0 calls?"), std::string::npos) << tp->constraint.source;
  // The grammar of one call at most (its behaviour: structured/tool_calls_test.cpp).
  const std::vector<structured::tool_def> defs = {{s.tools[0].name, s.tools[0].description, s.tools[0].parameters, false}};
  EXPECT_EQ(tp->constraint.source, *structured::auto_calls_grammar(structured::tool_format::hermes, defs, false));
  EXPECT_NE(tp->constraint.source, *structured::auto_calls_grammar(structured::tool_format::hermes, defs, true));

  auto plain = weather_request();
  auto free_text = make_tool_prompt(plain, structured::tool_format::hermes);
  ASSERT_TRUE(free_text);
  EXPECT_TRUE(free_text->constraint.empty()) << "parallel calls allowed, nothing strict: the reply stays free";

  // "required" is one call or more (OpenAI's words) while parallel calls are allowed (the
  // streamer ends a reply that repeats one), one without; a named function is that one call.
  auto forced = s;
  forced.tool_choice = tool_choice::required;
  auto f = make_tool_prompt(forced, structured::tool_format::hermes);
  ASSERT_TRUE(f) << f.error();
  EXPECT_EQ(f->constraint.source, *structured::calls_grammar(structured::tool_format::hermes, defs, "", false));
  forced.parallel_tool_calls = true;
  f = make_tool_prompt(forced, structured::tool_format::hermes);
  ASSERT_TRUE(f) << f.error();
  EXPECT_EQ(f->constraint.source, *structured::calls_grammar(structured::tool_format::hermes, defs, "", true));
  // Mistral's calls are one list, without markers around each: one call.
  f = make_tool_prompt(forced, structured::tool_format::mistral);
  ASSERT_TRUE(f) << f.error();
  EXPECT_EQ(f->constraint.source, *structured::calls_grammar(structured::tool_format::mistral, defs, "", false));
  forced.tool_choice = tool_choice::function;
  forced.tool_choice_name = "get_weather";
  f = make_tool_prompt(forced, structured::tool_format::hermes);
  ASSERT_TRUE(f) << f.error();
  EXPECT_EQ(f->constraint.source, *structured::calls_grammar(structured::tool_format::hermes, defs, "get_weather", false));

  auto l3 = make_tool_prompt(s, structured::tool_format::llama3);
  ASSERT_FALSE(l3) << "llama3's calls have no marker: the reply cannot be held to one call under auto";
  EXPECT_NE(l3.error().find("parallel_tool_calls"), std::string::npos) << l3.error();
}

// A forced call leaves no text for a structured output to hold: the call's grammar replaces it
// (instructor's RESPONSES_TOOLS mode sends a json_schema text.format with a named function).
TEST(ToolPrompt, AForcedCallTakesThePlaceOfAStructuredOutput) {
  auto f = weather_request();
  f.tool_choice = tool_choice::required;
  f.constraint = {structured::kind::json_object, ""};
  auto g = make_tool_prompt(f, structured::tool_format::hermes);
  ASSERT_TRUE(g) << g.error();
  const std::vector<structured::tool_def> defs = {{f.tools[0].name, f.tools[0].description, f.tools[0].parameters, false}};
  EXPECT_EQ(g->constraint.kind, structured::kind::grammar);
  EXPECT_EQ(g->constraint.source, *structured::calls_grammar(structured::tool_format::hermes, defs, "", f.parallel_tool_calls));
}

// A participant's name goes with its turn (the template writes it); a tool result's name does not.
TEST(ToolPrompt, ParticipantNamesAreKept) {
  auto s = weather_request();
  s.messages[1].name = "alice";  // the user turn
  auto tp = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_TRUE(tp) << tp.error();
  bool found = false;
  for (const auto& m : tp->messages) found = found || (m.name == "alice" && m.role == "user");
  EXPECT_TRUE(found);
}

TEST(ToolPrompt, ErrorsNameTheProblem) {
  auto s = weather_request();
  s.messages.push_back({"tool", "x", {}, "", {}});
  auto e = make_tool_prompt(s, structured::tool_format::hermes);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("tool_call_id"), std::string::npos);
  request_spec p;
  p.prompt = "x";
  p.tools = weather_request().tools;
  auto h = make_tool_prompt(p, structured::tool_format::hermes);
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().find("'tools'"), std::string::npos);
}

// OpenAI's rule: each call of an assistant turn is answered by a tool message before the
// conversation goes on, and a tool message answers a call of the turn before it.
TEST(ToolPrompt, EveryCallIsAnsweredAndEveryResultAnswersACall) {
  auto with = [](std::vector<chat_message> tail) {
    auto s = weather_request();
    for (auto& m : tail) s.messages.push_back(std::move(m));
    return make_tool_prompt(s, structured::tool_format::hermes);
  };
  const chat_message two_calls{"assistant", "", {{"a", "get_weather", "{}"}, {"b", "get_weather", "{}"}}, {}, {}};
  // Answered in any order: accepted.
  EXPECT_TRUE(with({two_calls, {"tool", "2", {}, "b", {}}, {"tool", "1", {}, "a", {}}, {"user", "thanks", {}, {}, {}}}));
  // One call left unanswered before the next user turn, or at the end.
  auto e = with({two_calls, {"tool", "1", {}, "a", {}}, {"user", "and?", {}, {}, {}}});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("'b' (tool_call_id) not answered before messages[4]"), std::string::npos) << e.error();
  e = with({two_calls});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("'a', 'b' (tool_call_id) not answered at the end"), std::string::npos) << e.error();
  // A result for a call that was never made, answered twice, or with no call before it.
  e = with({two_calls, {"tool", "1", {}, "c", {}}});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("'messages[3].tool_call_id' \"c\" answers no unanswered call"), std::string::npos) << e.error();
  EXPECT_NE(e.error().find("(its tool_calls: 'a', 'b')"), std::string::npos) << e.error();
  e = with({two_calls, {"tool", "1", {}, "a", {}}, {"tool", "1", {}, "a", {}}});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("\"a\" answers no unanswered call"), std::string::npos) << e.error();
  e = with({{"tool", "1", {}, "a", {}}});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("no assistant message with tool_calls comes before it"), std::string::npos) << e.error();
  // Llama 3's format has no call ids: a result without one answers the next call.
  auto s = weather_request();
  s.messages.push_back({"assistant", "", {{"a", "get_weather", "{}"}}, {}, {}});
  s.messages.push_back({"tool", "1", {}, "", {}});
  EXPECT_TRUE(make_tool_prompt(s, structured::tool_format::llama3));
}

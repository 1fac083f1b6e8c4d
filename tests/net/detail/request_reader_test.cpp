// net/detail/request_reader through the completions codec: `prompt` as text, as token ids (as
// OpenAI's completions take them), and a batch of prompts, refused in its own words; what the
// openai client's .parse() sends back as history.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/openai_codec.hpp"

using troupe::net::parse_openai_request;

TEST(request_reader, a_prompt_may_be_token_ids_but_not_a_batch) {
  for (const char* p : {R"([1,2,3])", R"([[1,2,3]])"}) {
    auto ok = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false);
    ASSERT_TRUE(ok.request) << p;
    EXPECT_EQ(ok.request->spec.prompt_tokens, (std::vector<int32_t>{1, 2, 3})) << p;
    EXPECT_TRUE(ok.request->spec.prompt.empty());
  }
  for (const char* p : {R"([[1,2],[3]])", R"(["a","b"])"}) {
    auto e = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false).error;
    EXPECT_EQ(e.param, "prompt") << p;
    EXPECT_NE(e.message.find("a batch is not served"), std::string::npos) << e.message;
  }
  for (const char* p : {R"([])", R"([-1])", R"([1.5])", R"([1,"a"])", R"([4294967296])", R"([[]])"}) {
    auto e = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false).error;
    EXPECT_EQ(e.param, "prompt") << p;
    EXPECT_NE(e.message.find("token ids"), std::string::npos) << p << ": " << e.message;
  }
}

// What the openai client's .parse() returns, sent back as history: the message's `parsed` and
// each call's `parsed_arguments` are its copies of content and arguments, read as sent (content
// and arguments count). Another role's `parsed` is refused by name.
TEST(request_reader, a_parsed_answer_sent_back_is_read) {
  auto r = parse_openai_request(
      R"({"messages":[{"role":"user","content":"hi"},
          {"role":"assistant","content":"{\"a\":1}","parsed":{"a":1},"refusal":null,
           "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":2}","parsed_arguments":{"x":2}}}]},
          {"role":"tool","tool_call_id":"c1","content":"ok"}],
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]})",
      true);
  ASSERT_TRUE(r.request) << r.error.message;
  EXPECT_EQ(r.request->spec.messages[1].content, "{\"a\":1}");
  ASSERT_EQ(r.request->spec.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.request->spec.messages[1].tool_calls[0].arguments, "{\"x\":2}");
  auto user = parse_openai_request(R"({"messages":[{"role":"user","content":"x","parsed":null}]})", true);
  EXPECT_EQ(user.error.param, "messages[0].parsed");
}

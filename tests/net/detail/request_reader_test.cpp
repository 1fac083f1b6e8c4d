// net/detail/request_reader through the chat codec: what the openai client's .parse() sends back
// as history.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/openai_codec.hpp"

using troupe::net::parse_openai_request;

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

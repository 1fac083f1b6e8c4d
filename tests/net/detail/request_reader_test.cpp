// net/detail/request_reader through the completions codec: `prompt` as text, as token ids (as
// OpenAI's completions take them), and a batch of prompts, refused in its own words.
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

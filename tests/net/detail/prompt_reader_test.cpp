// net/detail/prompt_reader through the completions codec and the WebSocket frame: `prompt` as
// text, as token ids (as OpenAI's completions take them), and a batch of prompts, served on
// /v1/completions (prompt p's choices numbered p * n ..) and refused in its own words elsewhere.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/openai_codec.hpp"
#include "net/ws_protocol.hpp"

using troupe::net::parse_openai_request;

TEST(prompt_reader, a_prompt_may_be_text_or_token_ids) {
  for (const char* p : {R"([1,2,3])", R"([[1,2,3]])"}) {
    auto ok = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false);
    ASSERT_TRUE(ok.request) << p;
    EXPECT_EQ(ok.request->spec.prompt_tokens, (std::vector<int32_t>{1, 2, 3})) << p;
    EXPECT_TRUE(ok.request->spec.prompt.empty());
    EXPECT_TRUE(ok.request->batch.empty()) << "one prompt is no batch";
  }
  auto one = parse_openai_request(R"({"prompt":["hi"]})", false);
  ASSERT_TRUE(one.request);
  EXPECT_EQ(one.request->spec.prompt, "hi");
  EXPECT_TRUE(one.request->batch.empty());
  for (const char* p : {R"([])", R"([-1])", R"([1.5])", R"([1,"a"])", R"([4294967296])", R"([[]])"}) {
    auto e = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false).error;
    EXPECT_EQ(e.param, "prompt") << p;
    EXPECT_NE(e.message.find("token ids"), std::string::npos) << p << ": " << e.message;
  }
}

TEST(prompt_reader, a_batch_of_prompts_is_read_on_completions) {
  auto b = parse_openai_request(R"({"prompt":["one",[5,6],"three"],"n":2})", false);
  ASSERT_TRUE(b.request) << b.error.message;
  const auto& batch = b.request->batch;
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].text, "one");
  EXPECT_EQ(batch[1].tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(batch[2].text, "three");
  EXPECT_EQ(b.request->spec.prompt, "one") << "the first stands for the request where one prompt is read";
  EXPECT_EQ(b.request->n, 2);
  auto ids = parse_openai_request(R"({"prompt":[[1,2],[3]]})", false);
  ASSERT_TRUE(ids.request) << ids.error.message;
  EXPECT_EQ(ids.request->batch.size(), 2u);
  for (const char* p : {R"(["a",""])", R"(["a",[]])", R"(["a",[-1]])", R"(["a",{}])", R"(["a",null])"}) {
    auto e = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false).error;
    EXPECT_EQ(e.param, "prompt[1]") << p << ": " << e.message;
  }
  std::string many = R"({"n":2,"prompt":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"p\"";
  auto e = parse_openai_request(many + "]}", false).error;
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("at most 128 choices"), std::string::npos) << e.message;
}

TEST(prompt_reader, a_batch_is_refused_where_one_prompt_is_taken) {
  auto f = troupe::net::parse_client_frame(R"({"type":"generate","id":"a","prompt":["one","two"]})");
  ASSERT_FALSE(f.frame);
  EXPECT_EQ(f.error.param, "prompt");
  EXPECT_NE(f.error.message.find("a batch is not served here"), std::string::npos) << f.error.message;
}

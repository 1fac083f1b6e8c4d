// net/detail/prompt_cache_fields through both codecs: the prompt-cache and moderation fields of
// newer openai clients, null or what the prefix cache does anyway accepted, the rest refused by
// name; a content part's prompt_cache_breakpoint likewise.
#include <gtest/gtest.h>

#include <string>

#include "net/openai_codec.hpp"
#include "net/responses_codec.hpp"

using troupe::net::parse_openai_request;
using troupe::net::parse_responses_request;

namespace {

const std::string chat_head = R"({"messages":[{"role":"user","content":"hi"}])";

troupe::net::api_error chat_error(const std::string& fields) {
  auto p = parse_openai_request(chat_head + "," + fields + "}", true);
  return p.request ? troupe::net::api_error{} : p.error;
}

troupe::net::api_error responses_error(const std::string& fields) {
  auto p = parse_responses_request(R"({"input":"hi",)" + fields + "}", {});
  return p.request ? troupe::net::api_error{} : p.error;
}

}  // namespace

TEST(prompt_cache_fields, what_the_prefix_cache_does_is_accepted) {
  for (const char* f : {R"("prompt_cache_retention":null)", R"("prompt_cache_retention":"in_memory")",
                        R"("prompt_cache_options":null)", R"("prompt_cache_options":{})",
                        R"("prompt_cache_options":{"mode":"implicit"})", R"("moderation":null)"}) {
    EXPECT_TRUE(chat_error(f).message.empty()) << f << ": " << chat_error(f).message;
    EXPECT_TRUE(responses_error(f).message.empty()) << f << ": " << responses_error(f).message;
  }
}

TEST(prompt_cache_fields, the_rest_is_refused_by_name) {
  struct refused {
    const char* field;
    const char* param;
    const char* says;
  };
  for (const refused& c : {refused{R"("prompt_cache_retention":"24h")", "prompt_cache_retention", "in_memory"},
                           refused{R"("prompt_cache_options":{"mode":"explicit"})", "prompt_cache_options.mode", "implicit"},
                           refused{R"("prompt_cache_options":{"ttl":"30m"})", "prompt_cache_options.ttl", "lifetime"},
                           refused{R"("prompt_cache_options":{"x":1})", "prompt_cache_options.x", "unknown"},
                           refused{R"("prompt_cache_options":"30m")", "prompt_cache_options", "an object"},
                           refused{R"("moderation":{"input":{"mode":"block"}})", "moderation", "moderation"}}) {
    for (const auto& e : {chat_error(c.field), responses_error(c.field)}) {
      EXPECT_EQ(e.param, c.param) << c.field << ": " << e.message;
      EXPECT_NE(e.message.find(c.says), std::string::npos) << c.field << ": " << e.message;
    }
  }
  for (const char* f : {"access_programs", "background_options", "context_management", "image"}) {
    const auto e = responses_error("\"" + std::string(f) + "\":{}");
    EXPECT_EQ(e.param, f) << e.message;
    EXPECT_EQ(e.code, "unsupported_field") << e.message;
  }
}

TEST(prompt_cache_fields, a_null_breakpoint_in_a_part_is_read) {
  auto chat = parse_openai_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi","prompt_cache_breakpoint":null}]}]})", true);
  EXPECT_TRUE(chat.request) << chat.error.message;
  auto e = parse_openai_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi","prompt_cache_breakpoint":{}}]}]})", true);
  EXPECT_EQ(e.error.param, "messages[0].content[0].prompt_cache_breakpoint") << e.error.message;
  auto resp = parse_responses_request(
      R"({"input":[{"role":"user","content":[{"type":"input_text","text":"hi","prompt_cache_breakpoint":null}]}]})", {});
  EXPECT_TRUE(resp.request) << resp.error.message;
  auto re = parse_responses_request(
      R"({"input":[{"role":"user","content":[{"type":"input_text","text":"hi","prompt_cache_breakpoint":{"x":1}}]}]})", {});
  EXPECT_EQ(re.error.param, "input[0].content[0].prompt_cache_breakpoint") << re.error.message;
}

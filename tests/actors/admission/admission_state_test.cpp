// admission_state driven directly.
#include "actors/admission/admission_state.hpp"

#include <gtest/gtest.h>

#include "net/openai_codec.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

admission_config acfg() {
  admission_config c;
  c.model_name = "m";
  c.n_ctx = 64;
  c.n_vocab = 320;
  c.max_tokens_cap = 32;
  c.default_max_tokens = 16;
  c.max_pending = 3;
  return c;
}

request_spec spec(const std::string& prompt, int32_t max_tokens = 8) {
  request_spec s;
  s.prompt = prompt;
  s.max_tokens = max_tokens;
  return s;
}

}  // namespace

TEST(admission_state, admits_and_tokenizes) {
  admission_state a(acfg(), make_byte_codec());
  auto d = a.admit(spec("hi there", 4), 100);
  ASSERT_TRUE(d.ok) << d.error.message;
  EXPECT_EQ(d.request.id, 1u);
  EXPECT_EQ(d.request.prompt.size(), 8u);
  EXPECT_EQ(d.request.max_tokens, 4);
  EXPECT_EQ(d.request.eog, std::vector<int32_t>{256});
  EXPECT_EQ(d.request.tenant, "default");
  EXPECT_EQ(d.open.prompt_tokens, 8);
  EXPECT_EQ(a.admit(spec("x"), 100).request.id, 2u);
}

TEST(admission_state, validation_errors_name_the_problem) {
  admission_state a(acfg(), make_byte_codec());
  auto s = spec("x");
  s.model = "other";
  EXPECT_EQ(a.admit(s, 0).error.code, errc::unknown_model);
  s = spec("x", 33);
  auto d = a.admit(s, 0);
  EXPECT_EQ(d.error.code, errc::invalid_request);
  EXPECT_NE(d.error.message.find("cap of 32"), std::string::npos);
  EXPECT_EQ(a.admit(spec(std::string(60, 'a'), 8), 0).error.code, errc::context_length);
  {
    auto c = acfg();
    c.max_prompt_tokens = 5;
    admission_state limited(c, make_byte_codec());
    EXPECT_TRUE(limited.admit(spec("12345", 4), 0).ok);
    auto over = limited.admit(spec("123456", 4), 0);
    EXPECT_EQ(over.error.code, errc::context_length);
    EXPECT_NE(over.error.message.find("admission.max_prompt_tokens = 5"), std::string::npos) << over.error.message;
  }
  s = spec("x");
  s.sampling.top_p = 0;
  EXPECT_NE(a.admit(s, 0).error.message.find("top_p"), std::string::npos);
  request_spec none;
  EXPECT_EQ(a.admit(none, 0).error.code, errc::invalid_request);
  s = spec("x");
  s.prompt_tokens = {1, 2};
  EXPECT_EQ(a.admit(s, 0).error.code, errc::invalid_request);  // two inputs
  request_spec toks;
  toks.prompt_tokens = {1, 999};
  EXPECT_NE(a.admit(toks, 0).error.message.find("vocabulary"), std::string::npos);
  s = spec("x");
  s.stop = {""};
  EXPECT_EQ(a.admit(s, 0).error.code, errc::invalid_request);
  EXPECT_EQ(a.stats().admitted, 0);
}

// adv6 F7: a method the scheduler would refuse is refused here, before the response cache could
// answer the request; the scheduler's own words, so a hit and a miss read alike.
TEST(admission_state, speculative_method_is_checked_before_the_cache) {
  auto c = acfg();
  c.max_pending = 16;
  c.speculative = speculative_config{};  // no draft model
  admission_state a(c, make_byte_codec());
  auto s = spec("x");
  s.speculative = "bogus";
  auto d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.code, errc::invalid_request);
  EXPECT_EQ(d.error.message.rfind("speculative: unknown speculative method 'bogus' (known: ", 0), 0u) << d.error.message;
  EXPECT_NE(d.error.message.find("ngram"), std::string::npos) << d.error.message;
  s.speculative = "draft";
  d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.message.rfind("speculative: speculative.draft_model is not set", 0), 0u) << d.error.message;
  for (const char* ok : {"", "off", "ngram", "suffix"}) {
    s.speculative = ok;
    EXPECT_TRUE(a.admit(s, 0).ok) << ok;
  }
  EXPECT_EQ(a.stats().rejected, 2);

  c.speculative->draft_model = "draft.gguf";  // loading it is the scheduler's, on a miss
  admission_state with_draft(c, make_byte_codec());
  s.speculative = "draft";
  EXPECT_TRUE(with_draft.admit(s, 0).ok);
  c.speculative.reset();  // the pipeline gave no [speculative] section: the name alone is checked
  admission_state name_only(c, make_byte_codec());
  EXPECT_TRUE(name_only.admit(s, 0).ok);
  s.speculative = "bogus";
  EXPECT_FALSE(name_only.admit(s, 0).ok);
}

TEST(admission_state, default_max_tokens_shrinks_to_fit_the_context) {
  admission_state a(acfg(), make_byte_codec());
  auto d = a.admit(spec(std::string(56, 'a'), 0), 0);
  ASSERT_TRUE(d.ok);
  EXPECT_EQ(d.request.max_tokens, 8);
}

TEST(admission_state, queue_cap_rejects_overloaded_with_retry_after) {
  admission_state a(acfg(), make_byte_codec());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.admit(spec("x"), i * 1000).ok);
  auto d = a.admit(spec("x"), 3000);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.code, errc::overloaded);
  EXPECT_GE(d.error.retry_after_ms, 100);
  a.on_closed(1, 10'000);
  a.on_closed(2, 60'000);
  EXPECT_TRUE(a.admit(spec("x"), 61'000).ok);
  EXPECT_TRUE(a.admit(spec("x"), 61'000).ok);
  d = a.admit(spec("x"), 61'000);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.retry_after_ms, 100);  // one completion every 50 ms, clamped to 100
  EXPECT_EQ(a.stats().overloaded, 2);
}

TEST(admission_state, tenant_token_buckets) {
  auto c = acfg();
  c.max_pending = 1000;
  c.tenants["small"] = tenant_limits{2, 2, 0, 0};       // 2 requests/s, burst 2
  c.tenants["tokens"] = tenant_limits{0, 0, 20, 20};    // 20 tokens/s
  admission_state a(c, make_byte_codec());
  auto s = spec("x", 1);
  s.tenant = "small";
  EXPECT_TRUE(a.admit(s, 0).ok);
  EXPECT_TRUE(a.admit(s, 0).ok);
  auto d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.code, errc::rate_limited);
  EXPECT_EQ(d.error.retry_after_ms, 500);
  EXPECT_TRUE(a.admit(s, 500'000).ok);  // one request refilled after 0.5 s
  // Other tenants are not affected.
  EXPECT_TRUE(a.admit(spec("x", 1), 0).ok);
  auto t = spec("abcde", 5);  // 10 tokens
  t.tenant = "tokens";
  EXPECT_TRUE(a.admit(t, 0).ok);
  EXPECT_TRUE(a.admit(t, 0).ok);
  d = a.admit(t, 0);
  EXPECT_EQ(d.error.code, errc::rate_limited);
  EXPECT_EQ(d.error.retry_after_ms, 500);
  auto big = spec(std::string(30, 'a'), 5);
  big.tenant = "tokens";
  EXPECT_NE(a.admit(big, 10'000'000).error.message.find("burst"), std::string::npos);
}

TEST(admission_state, deadlines_become_absolute) {
  auto c = acfg();
  c.default_deadline_ms = 500;
  admission_state a(c, make_byte_codec());
  auto s = spec("x");
  EXPECT_EQ(a.admit(s, 1000).request.deadline_us, 501'000);
  s.deadline_ms = 20;
  EXPECT_EQ(a.admit(s, 1000).request.deadline_us, 21'000);
}

TEST(admission_state, chat_messages_are_rendered) {
  admission_state a(acfg(), make_byte_codec());
  request_spec s;
  s.messages = {{"user", "hi"}};
  s.max_tokens = 4;
  auto d = a.admit(s, 0);
  ASSERT_TRUE(d.ok);
  std::string text(d.request.prompt.begin(), d.request.prompt.end());
  EXPECT_EQ(text, "user: hi\nassistant: ");
  s.messages = {{"robot", "hi"}};
  EXPECT_NE(a.admit(s, 0).error.message.find("robot"), std::string::npos);
}

// One tenant's requests in progress are capped (issue 24, item 6); another tenant is not held back.
TEST(admission_state, one_tenants_requests_in_progress_are_capped) {
  auto cfg = acfg();
  cfg.max_pending = 10;
  cfg.max_pending_per_tenant = 2;
  admission_state a(cfg, make_byte_codec());
  auto spec_for = [](const std::string& tenant) {
    auto s = spec("hello", 4);
    s.tenant = tenant;
    return s;
  };
  ASSERT_TRUE(a.admit(spec_for("a"), 1).ok);
  const auto second = a.admit(spec_for("a"), 2);
  ASSERT_TRUE(second.ok);
  auto c = a.admit(spec_for("a"), 3);
  ASSERT_FALSE(c.ok);
  EXPECT_EQ(c.error.code, errc::rate_limited);
  EXPECT_NE(c.error.message.find("admission.max_pending_per_tenant"), std::string::npos) << c.error.message;
  EXPECT_GT(c.error.retry_after_ms, 0);
  EXPECT_TRUE(a.admit(spec_for("b"), 4).ok);
  a.on_closed(second.request.id, 5);
  EXPECT_TRUE(a.admit(spec_for("a"), 6).ok) << "a slot of its own again once one ends";
}

// The HTTP layer names the refused field from the message's first word: these must name `stop`.
TEST(admission_state, stop_string_refusals_name_the_stop_field) {
  auto c = acfg();
  c.max_stop_strings = 2;
  admission_state a(c, make_byte_codec());
  auto s = spec("x");
  s.stop = {"a", "b", "c"};
  auto d = a.admit(s, 0);
  EXPECT_EQ(d.error.code, errc::invalid_request);
  EXPECT_EQ(d.error.message, "'stop' has more than 2 strings (admission.max_stop_strings)");
  EXPECT_EQ(net::from_pipeline_error(d.error).param, "stop");
  s.stop = {"a", ""};
  d = a.admit(s, 0);
  EXPECT_EQ(d.error.message, "'stop' strings must not be empty");
  EXPECT_EQ(net::from_pipeline_error(d.error).param, "stop");
}

// ignore_eos with an output constraint is refused, naming where the constraint came from: the
// request's structured output, or its tools (a forced call; the reply ends with its calls).
TEST(admission_state, ignore_eos_refusals_name_the_constraint_they_clash_with) {
  auto c = acfg();
  c.n_ctx = 1024;  // the tools' prompt
  admission_state a(c, make_byte_codec());
  request_spec s;
  s.messages = {{"user", "hi"}};
  s.max_tokens = 4;
  s.ignore_eos = true;
  s.constraint = {structured::kind::json_object, ""};
  auto d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_NE(d.error.message.find("structured output"), std::string::npos) << d.error.message;
  s.constraint = {};
  s.tools = {{"f", "", R"({"type":"object","properties":{}})"}};
  s.tool_choice = tool_choice::required;
  d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_EQ(d.error.message.rfind("'ignore_eos'", 0), 0u) << d.error.message;
  EXPECT_NE(d.error.message.find("forced tool call"), std::string::npos) << d.error.message;
  s.ignore_eos = false;
  d = a.admit(s, 0);
  EXPECT_TRUE(d.ok) << d.error.message;
  // A forced call with a structured output: the call's grammar holds the reply, and ignore_eos
  // is refused naming the call; the structured output's schema is still checked.
  s.constraint = {structured::kind::json_schema, R"({"type":"object","properties":{"a":{"type":"string"}}})"};
  d = a.admit(s, 0);
  EXPECT_TRUE(d.ok) << d.error.message;
  s.ignore_eos = true;
  d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_NE(d.error.message.find("forced tool call"), std::string::npos) << d.error.message;
  s.ignore_eos = false;
  s.constraint = {structured::kind::json_schema, R"({"type":"object","properties":{"a":{"type":"nonsense"}}})"};
  d = a.admit(s, 0);
  ASSERT_FALSE(d.ok);
  EXPECT_NE(d.error.message.find("nonsense"), std::string::npos) << d.error.message;
}

// What the response-cache stage hands cache/: the query of an admitted request and the answer
// of a closed stream.
#include "actors/response_cache/policy.hpp"

#include <gtest/gtest.h>

#include "actors/admission/admission_state.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

admission_config acfg() {
  admission_config c;
  c.model_name = "m";
  c.n_ctx = 256;
  c.n_vocab = 320;  // make_byte_codec's
  return c;
}

}  // namespace

TEST(response_cache_policy, query_of_an_admitted_chat_splits_its_messages) {
  admission_state a(acfg(), make_byte_codec());
  request_spec chat;
  chat.messages = {{"system", "Be brief."}, {"user", "Capital of France?"}};
  chat.max_tokens = 4;
  chat.stop = {"\n"};
  chat.cache = cache::cache_choice::requested;
  auto d = a.admit(chat, 0);
  ASSERT_TRUE(d.ok) << d.error.message;
  const auto q = query_of(d.request);
  const auto texts = cache::cache_query::from_messages({{"system", "Be brief."}, {"user", "Capital of France?"}});
  EXPECT_EQ(q.context, texts.context);
  EXPECT_EQ(q.question, "Capital of France?");
  EXPECT_EQ(q.cache, cache::cache_choice::requested);
  EXPECT_EQ(q.id, d.request.id);
  EXPECT_EQ(q.model, "m");
  EXPECT_EQ(q.prompt, d.request.prompt);
  EXPECT_EQ(q.max_tokens, 4);
  EXPECT_EQ(q.stop, chat.stop);
  EXPECT_EQ(q.eog, d.request.eog);
  EXPECT_EQ(q.tenant, d.request.tenant);
  EXPECT_FALSE(q.share_across_tenants);  // scoped by default
  EXPECT_TRUE(query_of(d.request, true).share_across_tenants);
}

TEST(response_cache_policy, query_of_carries_the_tenant_and_the_constraint) {
  admission_state a(acfg(), make_byte_codec());
  request_spec chat;
  chat.messages = {{"user", "Capital of France?"}};
  chat.max_tokens = 4;
  chat.tenant = "alice";
  auto d = a.admit(chat, 0);
  ASSERT_TRUE(d.ok) << d.error.message;
  d.request.constraint = {"json_object", ""};  // what admission passes on of request_spec::constraint
  const auto q = query_of(d.request);
  EXPECT_EQ(q.tenant, "alice");
  EXPECT_EQ(q.constraint_kind, "json_object");
  // The two tenants' keys differ; shared, they are one.
  auto b = d.request;
  b.tenant = "bob";
  EXPECT_NE(cache::context_fingerprint(query_of(d.request)), cache::context_fingerprint(query_of(b)));
  EXPECT_EQ(cache::context_fingerprint(query_of(d.request, true)), cache::context_fingerprint(query_of(b, true)));
}

TEST(response_cache_policy, query_of_a_raw_prompt_or_tokens) {
  admission_state a(acfg(), make_byte_codec());
  request_spec raw;
  raw.prompt = "raw prompt";
  raw.max_tokens = 4;
  auto d = a.admit(raw, 0);
  ASSERT_TRUE(d.ok) << d.error.message;
  auto q = query_of(d.request);
  EXPECT_EQ(q.question, "raw prompt");
  EXPECT_TRUE(q.context.empty());
  EXPECT_EQ(q.cache, cache::cache_choice::automatic);

  request_spec tokens;
  tokens.prompt_tokens = {104, 105};
  tokens.max_tokens = 4;
  tokens.cache = cache::cache_choice::refused;  // `cache: false` reaches the query
  d = a.admit(tokens, 0);
  ASSERT_TRUE(d.ok) << d.error.message;
  q = query_of(d.request);
  EXPECT_TRUE(q.question.empty());  // nothing to compare by meaning: only the exact cache serves it
  EXPECT_TRUE(q.context.empty());
  EXPECT_EQ(q.prompt, tokens.prompt_tokens);
  EXPECT_EQ(q.cache, cache::cache_choice::refused);
}

TEST(response_cache_policy, answer_of_a_closed_stream) {
  closed_stream c;
  c.id = 7;
  c.finish_reason = finish::length;
  c.tokens = {1, 2};
  c.logprobs = {-0.5f, -0.25f};
  EXPECT_TRUE(answer_of(c).complete());
  EXPECT_EQ(answer_of(c).tokens, c.tokens);
  c.finish_reason = finish::stop;
  EXPECT_TRUE(answer_of(c).complete());
  c.filtered = true;
  EXPECT_FALSE(answer_of(c).complete());
  c.filtered = false;
  c.cached = true;
  EXPECT_FALSE(answer_of(c).complete());
  c.cached = false;
  for (const char* reason : {finish::cancelled, finish::deadline, finish::slow_consumer, finish::filtered, ""}) {
    c.finish_reason = reason;
    EXPECT_FALSE(answer_of(c).complete()) << reason;
  }
}

// A participant's name is part of its turn, so of the key: the same words from another speaker
// are another context; the question is still the last user message.
TEST(response_cache_policy, participant_names_are_part_of_the_context) {
  admission_state a(acfg(), make_byte_codec());
  request_spec chat;
  chat.messages = {{"system", "Be brief."}, {"user", "Capital of France?"}};
  chat.max_tokens = 4;
  auto plain = a.admit(chat, 0);
  chat.messages[1].name = "alice";
  auto alice = a.admit(chat, 0);
  chat.messages[1].name = "bob";
  auto bob = a.admit(chat, 0);
  ASSERT_TRUE(plain.ok && alice.ok && bob.ok);
  const auto qp = query_of(plain.request), qa = query_of(alice.request), qb = query_of(bob.request);
  EXPECT_EQ(qa.question, "Capital of France?");
  EXPECT_EQ(qb.question, "Capital of France?");
  EXPECT_NE(qa.context, qp.context);
  EXPECT_NE(qa.context, qb.context);
}

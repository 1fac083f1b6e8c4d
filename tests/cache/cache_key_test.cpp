// The cache key: the split of a chat into question and context, and the keys built on it.
#include "cache/cache_key.hpp"

#include <gtest/gtest.h>

using namespace troupe::cache;

TEST(CacheQuery, TheLastUserMessageIsTheQuestion) {
  auto q = cache_query::from_messages({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Capital of France?"}});
  EXPECT_EQ(q.question, "Capital of France?");
  EXPECT_NE(q.context.find("Be brief."), std::string::npos);
  EXPECT_NE(q.context.find("Hello!"), std::string::npos);
  EXPECT_EQ(q.context.find("Capital"), std::string::npos);
  auto p = cache_query::from_prompt("raw prompt", cache_choice::requested);
  EXPECT_EQ(p.question, "raw prompt");
  EXPECT_TRUE(p.context.empty());
  EXPECT_EQ(p.cache, cache_choice::requested);
  EXPECT_EQ(normalize_question("  a \n\t b  "), "a b");
  EXPECT_EQ(normalize_question("Keep Case"), "Keep Case");
}


// The semantic cache stores these fingerprints with every record: a change of their bytes would
// turn every stored answer into a miss.
TEST(CacheKey, TheStoredFingerprintsKeepTheirBytes) {
  auto q = cache_query::from_messages({{"system", "Be brief."}, {"user", "Capital of France?"}});
  q.model = "smollm2";
  q.max_tokens = 64;
  q.eog = {2};
  q.stop = {"\n"};
  q.sampling.temperature = 0.5f;
  q.sampling.seed = 7;
  // Shared across tenants and unconstrained: the bytes every record stored before tenants and
  // constraints were keyed carries.
  q.share_across_tenants = true;
  const fingerprint ctx = context_fingerprint(q);
  EXPECT_EQ(ctx.hex(), "1e40d7cf8c41179bfde7cf520e92cd0c");
  EXPECT_EQ(exact_fingerprint(ctx, normalize_question(q.question)).hex(), "32a4d8e40842001a384f74c223984512");
}

TEST(CacheKey, OneContextKeyServesBothCaches) {
  cache_query a;
  a.model = "m";
  a.prompt = {1, 2, 3};
  a.max_tokens = 8;
  cache_query b = a;
  // The semantic cache never sees the tokens; the exact cache matches them.
  b.prompt = {1, 2, 4};
  EXPECT_EQ(context_fingerprint(a), context_fingerprint(b));
  EXPECT_NE(exact_key(a), exact_key(b));
  // Greedy decoding ignores the seed: the semantic key does too, the exact key never has.
  b = a;
  b.sampling.seed = 9;
  EXPECT_EQ(context_fingerprint(a), context_fingerprint(b));
  EXPECT_NE(exact_key(a), exact_key(b));
  b = a;
  b.logprobs = true;
  EXPECT_EQ(context_fingerprint(a), context_fingerprint(b));
  EXPECT_NE(exact_key(a), exact_key(b));
  b = a;
  b.stop = {"\n"};
  EXPECT_NE(context_fingerprint(a), context_fingerprint(b));
  EXPECT_NE(exact_key(a), exact_key(b));
}

// Tenants (unless shared) and output constraints are part of the one context key, so both caches
// and both semantic paths (exact, by meaning) keep them apart.
TEST(CacheKey, TenantsAndConstraintsAreKeyed) {
  cache_query a;
  a.model = "m";
  a.prompt = {1, 2, 3};
  a.max_tokens = 8;
  a.tenant = "alice";
  cache_query b = a;
  b.tenant = "bob";
  EXPECT_NE(context_fingerprint(a), context_fingerprint(b));
  EXPECT_NE(exact_key(a), exact_key(b));
  // Opted in: one tenant's key serves another.
  a.share_across_tenants = b.share_across_tenants = true;
  EXPECT_EQ(context_fingerprint(a), context_fingerprint(b));
  EXPECT_EQ(exact_key(a), exact_key(b));
  // A key made before tenants were keyed (a shared one) never equals a scoped one, whatever the
  // tenant's name, the empty one included.
  cache_query scoped = a;
  scoped.share_across_tenants = false;
  scoped.tenant = "";
  EXPECT_NE(context_fingerprint(scoped), context_fingerprint(a));
  EXPECT_NE(exact_key(scoped), exact_key(a));

  // Constraints: none, another kind, another source are three keys; sharing does not merge them.
  cache_query json = a;
  json.constraint_kind = "json_schema";
  json.constraint_source = R"({"type":"object"})";
  cache_query other_schema = json;
  other_schema.constraint_source = R"({"type":"array"})";
  cache_query regex = json;
  regex.constraint_kind = "regex";
  for (const cache_query* q : {&a, &other_schema, &regex}) {
    EXPECT_NE(context_fingerprint(json), context_fingerprint(*q));
    EXPECT_NE(exact_key(json), exact_key(*q));
  }
  cache_query same = json;
  same.tenant = "carol";
  EXPECT_EQ(exact_key(json), exact_key(same));
}

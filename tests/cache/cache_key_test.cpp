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

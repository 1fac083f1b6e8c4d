// net/responses_store: the bounded store of the Responses API's responses, least recently used
// evicted first.
#include <gtest/gtest.h>

#include "net/responses_store.hpp"

using namespace troupe::net;

TEST(responses_store, keeps_at_most_its_capacity_evicting_the_least_recently_used) {
  responses_store s(2);
  s.put("a", {"A", "ca", {}});
  s.put("b", {"B", "cb", {}});
  ASSERT_TRUE(s.get("a"));  // a is now the most recently used
  s.put("c", {"C", "cc", {}});
  EXPECT_EQ(s.size(), 2u);
  EXPECT_FALSE(s.get("b"));
  EXPECT_EQ(s.get("a")->response_json, "A");
  EXPECT_EQ(s.get("c")->conversation, "cc");
  s.put("c", {"C2", "cc2", {}});  // the same id again replaces it
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.get("c")->response_json, "C2");
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_FALSE(s.get("a"));
  EXPECT_EQ(responses_store().capacity(), responses_store::default_capacity);
}

TEST(responses_store, keeps_at_most_its_bytes) {
  responses_store s(10, 10);
  EXPECT_TRUE(s.put("a", {"aaaa", "", {}}));
  EXPECT_TRUE(s.put("b", {"bbbb", "", {"x"}}));
  EXPECT_EQ(s.bytes(), 9u);
  EXPECT_TRUE(s.put("c", {"cc", "", {}}));  // 11 bytes: a, the least recently used, goes
  EXPECT_FALSE(s.get("a"));
  EXPECT_EQ(s.bytes(), 7u);
  EXPECT_FALSE(s.put("big", {std::string(11, 'x'), "", {}}));  // over the bound alone: not kept
  EXPECT_FALSE(s.get("big"));
  EXPECT_EQ(s.size(), 2u);
  EXPECT_TRUE(s.erase("b"));
  EXPECT_EQ(s.bytes(), 2u);
}

// net/auth: bearer keys and the constant-time comparison.
#include <gtest/gtest.h>

#include "net/auth.hpp"

using namespace troupe;
using namespace troupe::net;

TEST(auth, bearer_and_constant_time_compare) {
  EXPECT_EQ(bearer_key("Bearer abc"), "abc");
  EXPECT_EQ(bearer_key("bearer  abc "), "abc");
  EXPECT_EQ(bearer_key("Basic abc"), "");
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_EQ(find_key({}, ""), 0);
  EXPECT_EQ(find_key({"k1", "k2"}, "k2"), 1);
  EXPECT_EQ(find_key({"k1", "k2"}, "k3"), -1);
}

#include "model/stop_matcher.hpp"

#include <gtest/gtest.h>

using troupe::model::stop_matcher;

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheStop) {
  stop_matcher m({"\nUser:", "###"});
  EXPECT_EQ(m.push("Hello"), "Hello");
  EXPECT_EQ(m.push(" world\n"), " world");  // "\n" might start "\nUser:"
  EXPECT_EQ(m.push("Us"), "");
  EXPECT_EQ(m.push("er: hi"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\nUser:");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, ReleasesHeldTextWhenItTurnsOutNotToBeAStop) {
  stop_matcher m({"###"});
  EXPECT_EQ(m.push("a#"), "a");
  EXPECT_EQ(m.push("#b"), "##b");
  EXPECT_EQ(m.push("##"), "");
  EXPECT_EQ(m.flush(), "##");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopInsideOnePieceAndNoStops) {
  stop_matcher m({"END"});
  EXPECT_EQ(m.push("abcENDdef"), "abc");
  EXPECT_TRUE(m.stopped());
  stop_matcher none;
  EXPECT_EQ(none.push("anything"), "anything");
  EXPECT_EQ(none.flush(), "");
}

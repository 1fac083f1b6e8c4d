#include "cache/semantic/question_guard.hpp"

#include <gtest/gtest.h>

using troupe::cache::may_share_answer;

TEST(QuestionGuard, RefusesDifferentNumbers) {
  auto v = may_share_answer("What is the square root of 144?", "What is the square root of 169?");
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.reason, "different numbers");
  EXPECT_TRUE(may_share_answer("What is 15% of 200?", "Calculate 15 percent of 200.").ok);
}

TEST(QuestionGuard, RefusesSwappedWords) {
  auto v = may_share_answer("Book a flight from Paris to London.", "Book a flight from London to Paris.");
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.reason, "the same words in another order");
  EXPECT_FALSE(may_share_answer("How do I convert 5 km to miles?", "How do I convert 5 miles to km?").ok);
  EXPECT_TRUE(may_share_answer("What is the capital of France?", "what is the capital of france").ok);
}

TEST(QuestionGuard, RefusesOneReplacedContentWord) {
  auto v = may_share_answer("What is the capital of France?", "What is the capital of Germany?");
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.reason, "one content word replaced");
  EXPECT_FALSE(may_share_answer("How do I write a for loop in JavaScript?", "How do I write a while loop in JavaScript?").ok);
  EXPECT_FALSE(may_share_answer("Is it safe to eat raw eggs?", "Is it safe to eat raw chicken?").ok);
}

TEST(QuestionGuard, LetsParaphrasesThrough) {
  EXPECT_TRUE(may_share_answer("What is the capital of France?", "What's the capital city of France?").ok);
  EXPECT_TRUE(may_share_answer("Tell me a joke about programmers.", "Tell me a programmer joke.").ok);  // plural "s"
  EXPECT_TRUE(may_share_answer("Who painted the Mona Lisa?", "Which artist painted the Mona Lisa?").ok);
  EXPECT_TRUE(may_share_answer("Write a haiku about the ocean.", "Compose a haiku about the sea.").ok);
  EXPECT_TRUE(may_share_answer("", "").ok);
}

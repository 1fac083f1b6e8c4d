// structured/mask_logits: a matcher's allowed tokens applied to a row, the end tokens where the
// output may end, and the closing mode when the token budget runs short.
#include "structured/mask_logits.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

using namespace troupe::structured;

namespace {

// Tokens 0..255 are the bytes; 256 is an end token with no text; 257 is "ab".
std::shared_ptr<const token_vocabulary> vocab() {
  std::vector<std::string> bytes(258);
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = std::string(1, static_cast<char>(i));
  bytes[257] = "ab";
  return std::make_shared<const token_vocabulary>(std::move(bytes));
}

matcher make(const std::string& kind, const std::string& source) {
  auto c = compile({kind, source}, vocab());
  EXPECT_TRUE(c) << (c ? "" : c.error());
  return matcher(*c);
}

std::vector<float> ones() { return std::vector<float>(258, 1.0f); }

}  // namespace

TEST(MaskLogits, OnlyAllowedTokensKeepTheirLogitsAndEndWhereComplete) {
  auto m = make(kind::regex, "a+b?");
  std::vector<uint64_t> bits;
  auto row = ones();
  mask_logits(m, row.data(), 258, {256}, bits);
  EXPECT_EQ(row['a'], 1.0f);
  EXPECT_TRUE(std::isinf(row['b']));
  EXPECT_TRUE(std::isinf(row[256])) << "nothing written yet: no end";
  EXPECT_EQ(row[257], 1.0f) << "\"ab\" is a whole sentence: a token may span symbols";
  ASSERT_TRUE(m.accept('a'));
  row = ones();
  mask_logits(m, row.data(), 258, {256}, bits);
  EXPECT_EQ(row['a'], 1.0f);
  EXPECT_EQ(row['b'], 1.0f);
  EXPECT_EQ(row[257], 1.0f);
  EXPECT_EQ(row[256], 1.0f) << "\"a\" is complete: ending is allowed";
}

TEST(MaskLogits, ShortestCompletionAndTheBytesItTakes) {
  auto m = make(kind::grammar, R"(root ::= "{\"a\": " [0-9]+ ("," [0-9]+)* "}")");
  EXPECT_EQ(m.min_bytes_to_end(), 8);
  EXPECT_EQ(m.shortest_completion(), "{\"a\": 0}");
  for (char c : std::string("{\"a\": 12,3")) ASSERT_TRUE(m.accept(static_cast<unsigned char>(c)));
  EXPECT_EQ(m.min_bytes_to_end(), 1);
  EXPECT_EQ(m.shortest_completion(), "}");
  ASSERT_TRUE(m.accept('}'));
  EXPECT_EQ(m.min_bytes_to_end(), 0);
  EXPECT_TRUE(m.can_end());
}

TEST(MaskLogits, AShortBudgetAllowsOnlyWhatClosesTheOutput) {
  auto m = make(kind::json_object, "");
  for (char c : std::string("{\"k\": \"abc")) ASSERT_TRUE(m.accept(static_cast<unsigned char>(c)));
  const auto need = m.min_bytes_to_end();
  EXPECT_EQ(m.shortest_completion(), "\"}");
  std::vector<uint64_t> bits;
  auto row = ones();
  mask_logits(m, row.data(), 258, {256}, bits, /*remaining=*/1000);
  EXPECT_EQ(row['x'], 1.0f) << "plenty of budget: the string may go on";
  row = ones();
  mask_logits(m, row.data(), 258, {256}, bits, need + 1 + closing_margin);
  EXPECT_TRUE(std::isinf(row['x'])) << "budget short: only the closing quote";
  EXPECT_EQ(row['"'], 1.0f);
  // Following the closing mode to the end always completes within the budget.
  int64_t budget = need + 1 + closing_margin;
  int32_t t = -1;
  while (budget > 0) {
    row = ones();
    mask_logits(m, row.data(), 258, {256}, bits, budget--);
    t = -1;
    for (int32_t i = 0; i < 258 && t < 0; ++i)
      if (!std::isinf(row[static_cast<size_t>(i)])) t = i;
    ASSERT_GE(t, 0);
    if (t == 256) break;
    ASSERT_TRUE(m.accept(t));
  }
  EXPECT_EQ(t, 256) << "ended with the end token inside the budget";
}

// A choice that moves the way out far off (an object begun where null would close the output, as
// in a recursive pydantic model's Optional["Person"]) is not allowed once the tokens left could
// no longer close it: the output stays closable to the end of the budget.
TEST(MaskLogits, NearTheBudgetsEndNoTokenLeadsPastIt) {
  const std::string g =
      R"(root ::= "{\"boss\": " (person | "null") "}")"
      "\n"
      R"(person ::= "{\"name\": \"" [a-z]* "\", \"age\": " [0-9]+ ", \"boss\": " (person | "null") "}")";
  auto m = make(kind::grammar, g);
  for (char c : std::string("{\"boss\": ")) ASSERT_TRUE(m.accept(static_cast<unsigned char>(c)));
  ASSERT_EQ(m.min_bytes_to_end(), 5);  // null}
  ASSERT_EQ(m.max_entry_bytes(), 36);  // {"name": "", "age": 0, "boss": null}
  std::vector<uint64_t> bits;
  // Plenty left: both ways are open.
  auto row = ones();
  mask_logits(m, row.data(), 258, {256}, bits, /*remaining=*/200);
  EXPECT_EQ(row['{'], 1.0f);
  EXPECT_EQ(row['n'], 1.0f);
  // 30 tokens left: not closing yet (5 + 16 < 29), but a person takes 36 bytes more: only null.
  row = ones();
  mask_logits(m, row.data(), 258, {256}, bits, /*remaining=*/30);
  EXPECT_TRUE(std::isinf(row['{'])) << "an object could not be closed in the tokens left";
  EXPECT_EQ(row['n'], 1.0f);
  // Greedy on '{' whenever it is allowed, with 60 tokens: the output still closes in time.
  auto run = make(kind::grammar, g);
  std::string out;
  for (int64_t remaining = 60; remaining > 0; --remaining) {
    row = ones();
    row['{'] = 5.0f;  // the model's favourite
    row['a'] = 3.0f;
    mask_logits(run, row.data(), 258, {256}, bits, remaining);
    int best = 0;
    for (int t = 1; t < 258; ++t)
      if (row[static_cast<size_t>(t)] > row[static_cast<size_t>(best)]) best = t;
    if (best == 256) break;
    ASSERT_TRUE(run.accept(best)) << out;
    out += best == 257 ? "ab" : std::string(1, static_cast<char>(best));
    if (run.must_end()) break;
  }
  EXPECT_TRUE(run.can_end()) << "cut at the budget's end: " << out;
}

// Where the output may end at every point (text before a tool call, `[a-z]*`), the budget does not
// end it early: it runs to the last token, complete all the way (it used to get only the end token
// from closing_margin + 1 tokens before the budget's end).
TEST(MaskLogits, AnOutputThatMayEndAnywhereRunsToTheBudgetsEnd) {
  auto m = make(kind::regex, "[a-z]*");
  std::vector<uint64_t> bits;
  int64_t made = 0;
  for (int64_t remaining = 40; remaining > 0; --remaining) {
    auto row = ones();
    row['x'] = 5.0f;  // the model would rather go on
    mask_logits(m, row.data(), 258, {256}, bits, remaining);
    ASSERT_EQ(row['x'], 5.0f) << remaining << " tokens left";
    EXPECT_EQ(row[256], 1.0f) << "ending stays allowed";
    ASSERT_TRUE(m.accept('x'));
    ++made;
  }
  EXPECT_EQ(made, 40);
  EXPECT_TRUE(m.can_end());
  // A token that would leave the output open at the last token is not allowed.
  auto open = make(kind::regex, "(ab)*");
  auto row = ones();
  mask_logits(open, row.data(), 258, {256}, bits, /*remaining=*/1);
  EXPECT_TRUE(std::isinf(row['a'])) << "\"a\" alone could not be closed";
  EXPECT_EQ(row[257], 1.0f) << "\"ab\" leaves it complete";
}

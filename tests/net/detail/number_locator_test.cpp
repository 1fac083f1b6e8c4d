// net/detail/number_locator: the field path of a number simdjson refuses as out of range.
// Through the codecs: openai_codec_test.cpp, out_of_range_integers_are_named.
#include <gtest/gtest.h>

#include "net/detail/number_locator.hpp"

using troupe::net::detail::locate_bad_number;
using troupe::net::detail::number_in_range;

TEST(number_locator, number_in_range_takes_a_double_and_64_bit_integers) {
  for (const char* ok : {"0", "-0", "0.5", "1e308", "-1.7e308", "1e-400", "9223372036854775807",
                         "-9223372036854775808", "18446744073709551615"})
    EXPECT_TRUE(number_in_range(ok)) << ok;
  for (const char* bad : {"1e309", "-1e400", "2e400", "-9223372036854775809", "18446744073709551616",
                          "99999999999999999999999"})
    EXPECT_FALSE(number_in_range(bad)) << bad;
}

TEST(number_locator, names_a_top_level_field) {
  EXPECT_EQ(locate_bad_number(R"({"max_tokens":1e400})"), "max_tokens");
  EXPECT_EQ(locate_bad_number(R"({"temperature":-1e400})"), "temperature");
  EXPECT_EQ(locate_bad_number(R"({"seed":18446744073709551616})"), "seed") << "2**64";
  EXPECT_EQ(locate_bad_number(R"({"seed":-9223372036854775809})"), "seed") << "-2**63 - 1";
  EXPECT_EQ(locate_bad_number(R"({"a":1, "b":2, "c":1e999})"), "c");
}

TEST(number_locator, names_a_number_nested_in_arrays_and_objects) {
  EXPECT_EQ(locate_bad_number(R"({"n":[1, 2e400]})"), "n[1]");
  EXPECT_EQ(locate_bad_number(R"({"a":[1,2,{"b":-1e400}]})"), "a[2].b");
  EXPECT_EQ(locate_bad_number(R"({"logit_bias":{"12":1,"13":18446744073709551616}})"), "logit_bias.13");
  EXPECT_EQ(locate_bad_number(R"({"x":[[0],[1,[2,1e400]]]})"), "x[1][1][1]");
  EXPECT_EQ(locate_bad_number(R"({"messages":[{"role":"user"},{"content":[{"t":1},{"v":-1e400}]}]})"),
            "messages[1].content[1].v");
  // A closed object or array gives its parent's path back.
  EXPECT_EQ(locate_bad_number(R"({"a":{"b":1},"c":[{"d":[1]},1e400]})"), "c[1]");
  EXPECT_EQ(locate_bad_number(R"({ "a" : [ 1 , 1e400 ] })"), "a[1]") << "whitespace";
  EXPECT_EQ(locate_bad_number(R"([{"a":0},{"b":1e400}])"), "[1].b") << "a top-level array";
}

TEST(number_locator, looks_past_strings_and_escaped_quotes) {
  EXPECT_EQ(locate_bad_number(R"({"content":"1e400","n":1})"), "");
  EXPECT_EQ(locate_bad_number(R"({"stop":["a\"],[1e400",2e400]})"), "stop[1]");
  EXPECT_EQ(locate_bad_number(R"({"1e400":2e400})"), "1e400") << "a key that looks like a number";
}

TEST(number_locator, finds_nothing_where_every_number_is_in_range) {
  EXPECT_EQ(locate_bad_number(R"({"a":1e-400,"b":[18446744073709551615,-9223372036854775808]})"), "");
  EXPECT_EQ(locate_bad_number(""), "");
  EXPECT_EQ(locate_bad_number("{"), "");
  // A number that is the whole body has no field to name: the caller's plain message applies.
  EXPECT_EQ(locate_bad_number("1e400"), "");
}

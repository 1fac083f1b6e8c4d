// net/tokenize_codec without sockets: /tokenize and /detokenize bodies in llama-server's shapes.
#include "net/tokenize_codec.hpp"

#include <gtest/gtest.h>

#include "tests/net/valid_json.hpp"

using namespace troupe::net;
using troupe::net::test::valid_json;

TEST(tokenize_codec, parses_tokenize_with_llama_servers_defaults) {
  auto p = parse_tokenize_request(R"({"content":"héllo"})");
  ASSERT_TRUE(p.query) << p.error.message;
  EXPECT_EQ(p.query->content, "héllo");
  EXPECT_FALSE(p.query->add_special);
  EXPECT_TRUE(p.query->parse_special);
  EXPECT_FALSE(p.query->with_pieces);
  auto all = parse_tokenize_request(R"({"content":"","add_special":true,"parse_special":false,"with_pieces":true})");
  ASSERT_TRUE(all.query) << all.error.message;
  EXPECT_TRUE(all.query->add_special);
  EXPECT_FALSE(all.query->parse_special);
  EXPECT_TRUE(all.query->with_pieces);
}

TEST(tokenize_codec, bad_tokenize_bodies_name_the_field) {
  auto missing = parse_tokenize_request(R"({"text":"x"})");
  ASSERT_FALSE(missing.query);
  EXPECT_EQ(missing.error.status, 400);
  EXPECT_EQ(missing.error.param, "content");
  auto wrong = parse_tokenize_request(R"({"content":["x"]})");
  ASSERT_FALSE(wrong.query);
  EXPECT_EQ(wrong.error.param, "content");
  EXPECT_NE(wrong.error.message.find("must be a string"), std::string::npos);
  auto flag = parse_tokenize_request(R"({"content":"x","with_pieces":"yes"})");
  ASSERT_FALSE(flag.query);
  EXPECT_EQ(flag.error.param, "with_pieces");
  auto extra = parse_tokenize_request(R"({"content":"x","pieces":true})");
  ASSERT_FALSE(extra.query);
  EXPECT_EQ(extra.error.param, "pieces");
  EXPECT_NE(extra.error.message.find("unknown field 'pieces'"), std::string::npos);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1],"x":1})").error.param, "x");
  auto json = parse_tokenize_request("{");
  ASSERT_FALSE(json.query);
  EXPECT_EQ(json.error.code, "invalid_json");
}

TEST(tokenize_codec, parses_detokenize_and_names_the_bad_id) {
  auto p = parse_detokenize_request(R"({"tokens":[0,5,49151]})");
  ASSERT_TRUE(p.tokens) << p.error.message;
  EXPECT_EQ(*p.tokens, (std::vector<int32_t>{0, 5, 49151}));
  auto empty = parse_detokenize_request(R"({"tokens":[]})");
  ASSERT_TRUE(empty.tokens);
  EXPECT_TRUE(empty.tokens->empty());

  EXPECT_EQ(parse_detokenize_request(R"({})").error.param, "tokens");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":null})").error.param, "tokens");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":"1 2"})").error.param, "tokens");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,"2"]})").error.param, "tokens[1]");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2.5]})").error.param, "tokens[1]");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[-1]})").error.param, "tokens[0]");
  auto big = parse_detokenize_request(R"({"tokens":[1,2,4294967296]})");
  ASSERT_FALSE(big.tokens);
  EXPECT_EQ(big.error.param, "tokens[2]");
  EXPECT_NE(big.error.message.find("4294967296"), std::string::npos);
}

TEST(tokenize_codec, writes_ids_pieces_and_content) {
  tokenized t;
  t.tokens = {1, 2, 3};
  EXPECT_EQ(tokenize_json(t), R"({"tokens":[1,2,3]})");
  // A piece that is not valid UTF-8 on its own goes out as its bytes, as llama-server writes it.
  t.pieces = {"a", "\xF0\x9F", "\x8E\x89"};
  const auto s = tokenize_json(t);
  EXPECT_EQ(s, R"({"tokens":[{"id":1,"piece":"a"},{"id":2,"piece":[240,159]},{"id":3,"piece":[142,137]}]})");
  EXPECT_TRUE(valid_json(s));
  EXPECT_EQ(tokenize_json(tokenized{}), R"({"tokens":[]})");
  EXPECT_EQ(detokenize_json("a \"q\"\n"), R"({"content":"a \"q\"\n"})");
}

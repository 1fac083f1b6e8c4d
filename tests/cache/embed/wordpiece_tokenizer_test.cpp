#include "cache/embed/wordpiece_tokenizer.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cache/embed/bert_text.hpp"
#include "model/gguf_reader.hpp"
#include "tests/support/test_paths.hpp"

using troupe::cache::bert_basic_split;
using troupe::cache::bert_normalize;
using troupe::cache::wordpiece_tokenizer;

namespace {

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const wordpiece_tokenizer& bge_tokenizer() {
  static const wordpiece_tokenizer tok = [] {
    auto f = troupe::model::gguf_file::open(troupe::test::fixture("tokenizer/ggml-vocab-bert-bge.gguf"));
    if (!f) throw std::runtime_error(f.error());
    auto t = wordpiece_tokenizer::from_gguf(*f.value());
    if (!t) throw std::runtime_error(t.error());
    return std::move(t.value());
  }();
  return tok;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

// llama.cpp's BERT test vectors (made with Hugging Face's tokenizer): every text, exact ids.
TEST(WordpieceTokenizer, ReproducesBertBgeVectors) {
  const std::string inp = read_file(troupe::test::fixture("tokenizer/ggml-vocab-bert-bge.gguf.inp"));
  const std::string out = read_file(troupe::test::fixture("tokenizer/ggml-vocab-bert-bge.gguf.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    texts.push_back(inp.substr(pos, next - pos));
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    expected.push_back(std::move(ids));
  }
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GE(texts.size(), 40u);
  const auto& tok = bge_tokenizer();
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok.encode(texts[i]), expected[i]) << "text #" << i << ": \"" << printable(texts[i]) << "\"";
}

TEST(WordpieceTokenizer, GgufSpellingIsTurnedBackIntoVocabTxtSpelling) {
  const auto& tok = bge_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 30522u);
  EXPECT_EQ(tok.token(0), "[PAD]");
  EXPECT_EQ(tok.token(101), "[CLS]");
  EXPECT_EQ(tok.token(1996), "the");
  EXPECT_EQ(tok.id_of("##s"), 2015);
  EXPECT_EQ(tok.cls_id(), 101);
  EXPECT_EQ(tok.sep_id(), 102);
  EXPECT_EQ(tok.unk_id(), 100);
}

TEST(WordpieceTokenizer, ForModelAddsClsSepAndTruncates) {
  const auto& tok = bge_tokenizer();
  EXPECT_EQ(tok.encode_for_model("Hello world", 256), (std::vector<int32_t>{101, 7592, 2088, 102}));
  EXPECT_EQ(tok.encode_for_model("", 256), (std::vector<int32_t>{101, 102}));
  std::string long_text;
  for (int i = 0; i < 1000; ++i) long_text += "hello ";
  auto ids = tok.encode_for_model(long_text, 256);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(ids.front(), 101);
  EXPECT_EQ(ids[254], 7592);
  EXPECT_EQ(ids.back(), 102);
  EXPECT_EQ(tok.encode_for_model("hello hello hello", 3), (std::vector<int32_t>{101, 7592, 102}));
}

TEST(WordpieceTokenizer, LongWordsAndUnknownPiecesBecomeUnk) {
  const auto& tok = bge_tokenizer();
  EXPECT_EQ(tok.encode(std::string(101, 'a')), (std::vector<int32_t>{100}));
  EXPECT_EQ(tok.encode("\xF0\x9F\xA6\x99"), (std::vector<int32_t>{100}));  // a llama emoji
}

TEST(BertText, NormalisesLikeHuggingFace) {
  EXPECT_EQ(bert_normalize("Führer CAFÉ"), "fuhrer cafe");
  EXPECT_EQ(bert_normalize("a\tb\nc\r"), "a b c ");
  EXPECT_EQ(bert_normalize("zero\xE2\x80\x8Dwidth"), "zerowidth");  // U+200D is Cf: dropped
  EXPECT_EQ(bert_normalize("\xE5\xA4\xA9x"), " \xE5\xA4\xA9 x");   // a CJK ideograph is padded
  EXPECT_EQ(bert_normalize("ok\xFF\xFEstill"), "okstill");          // invalid UTF-8 is dropped
  // Hangul syllables decompose into conjoining jamo (NFD), which are kept.
  EXPECT_EQ(bert_normalize("\xEA\xB0\x80"), "\xE1\x84\x80\xE1\x85\xA1");
}

TEST(BertText, SplitsOnWhitespaceAndAroundPunctuation) {
  EXPECT_EQ(bert_basic_split("Hello, y'all!  $5"),
            (std::vector<std::string>{"hello", ",", "y", "'", "all", "!", "$", "5"}));
  EXPECT_TRUE(bert_basic_split(" \t\n").empty());
}

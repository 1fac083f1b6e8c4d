#include "model/detokenizer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/detail/tokenizer_utf8.hpp"
#include "model/gguf_reader.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;

namespace {

tokenizer load_fixture(const std::string& name) {
  auto f = gguf_file::open(troupe::test::fixture("tokenizer/ggml-vocab-" + name + ".gguf"));
  EXPECT_TRUE(f.ok()) << f.error();
  auto t = tokenizer::from_gguf(*f.value());
  EXPECT_TRUE(t.ok()) << t.error();
  return std::move(t.value());
}

bool valid_utf8(const std::string& s) {
  return detail::find_invalid_utf8(s) == std::string_view::npos;
}

// Streams `ids` through a detokenizer; every chunk must be valid UTF-8 on its own.
std::string stream(detokenizer& d, const std::vector<int32_t>& ids, std::vector<std::string>* chunks = nullptr) {
  std::string out;
  for (int32_t id : ids) {
    std::string c = d.push(id);
    EXPECT_TRUE(valid_utf8(c)) << "chunk after id " << id << " is not valid UTF-8";
    if (chunks) chunks->push_back(c);
    out += c;
  }
  std::string tail = d.flush();
  EXPECT_TRUE(valid_utf8(tail));
  return out + tail;
}

const std::string k_emoji_cjk = "\xF0\x9F\x98\x80\xF0\x9F\xA6\x99 \xE4\xB8\xAD\xE6\x96\x87";  // 😀🦙 中文

}  // namespace

TEST(Detokenizer, HoldsBackByteLevelPiecesOfEmojiAndCjk) {
  auto t = load_fixture("gpt-2");
  const auto ids = t.encode(k_emoji_cjk);
  ASSERT_EQ(ids, (std::vector<int32_t>{47249, 222, 8582, 99, 247, 220, 40792, 23877, 229}));
  // The raw pieces split the sequences: 47249 is the first two bytes of 😀.
  EXPECT_FALSE(valid_utf8(t.token_to_piece(47249)));
  detokenizer d(t);
  std::vector<std::string> chunks;
  EXPECT_EQ(stream(d, ids, &chunks), k_emoji_cjk);
  EXPECT_EQ(chunks[0], "");
  EXPECT_EQ(chunks[1], "\xF0\x9F\x98\x80");
}

TEST(Detokenizer, HoldsBackSentencePieceByteFallback) {
  auto t = load_fixture("llama-spm");
  const std::string text = "\xF0\x9D\x94\x98";  // 𝔘: not in the vocabulary, four <0xNN> tokens
  const auto ids = t.encode(text);
  ASSERT_EQ(ids, (std::vector<int32_t>{29871, 243, 160, 151, 155}));
  detokenizer d(t);
  EXPECT_EQ(d.push(29871), "");  // "▁": the added space prefix, dropped
  EXPECT_EQ(d.push(243), "");
  EXPECT_EQ(d.push(160), "");
  EXPECT_EQ(d.push(151), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(155), text);
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");
}

TEST(Detokenizer, SentencePieceLeadingSpaceRule) {
  auto t = load_fixture("llama-spm");
  const auto ids = t.encode("Hello world");
  detokenizer d(t);
  EXPECT_EQ(stream(d, ids), "Hello world");
  // Only the first piece loses its space, and only one space.
  EXPECT_EQ(stream(d, t.encode("  two")), "  two");
  // A bos in front renders as nothing and does not use up the rule.
  EXPECT_EQ(stream(d, t.encode("Hi", true)), "Hi");
  detokenizer::options keep;
  keep.strip_leading_space = false;
  detokenizer raw(t, keep);
  EXPECT_EQ(stream(raw, ids), " Hello world");
  // Byte-level BPE vocabularies add no space, so none is removed.
  auto g = load_fixture("gpt-2");
  detokenizer dg(g);
  EXPECT_EQ(stream(dg, g.encode(" leading")), " leading");
}

TEST(Detokenizer, FlushReplacesWhatNeverCompletedAndResets) {
  auto t = load_fixture("llama-spm");
  detokenizer d(t);
  EXPECT_EQ(d.push(t.find_token("<0xF0>")), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(d.pending_bytes(), 0u);
  // After flush the stream starts afresh, leading-space rule included.
  EXPECT_EQ(d.push(15043), "Hello");  // "▁Hello"
}

TEST(Detokenizer, IllFormedBytesBecomeReplacementCharacters) {
  auto t = load_fixture("llama-spm");
  detokenizer d(t);
  const int32_t f0 = t.find_token("<0xF0>"), ff = t.find_token("<0xFF>");
  const int32_t a = t.find_token("<0x41>");
  EXPECT_EQ(d.push(f0), "");
  EXPECT_EQ(d.push(a), "\xEF\xBF\xBD" "A");  // the sequence broke off: one U+FFFD, then A
  EXPECT_EQ(d.push(ff), "\xEF\xBF\xBD");     // never valid: replaced at once
}

TEST(Detokenizer, ControlTokensHiddenUnlessRendered) {
  auto t = load_fixture("gpt-2");
  detokenizer d(t);
  EXPECT_EQ(d.push(50256), "");
  detokenizer::options o;
  o.render_special = true;
  detokenizer r(t, o);
  EXPECT_EQ(r.push(50256), "<|endoftext|>");
  EXPECT_EQ(d.push(-5), "");  // out-of-range ids stand for nothing
}

TEST(Detokenizer, StreamingEqualsDecodeOnFixtureTexts) {
  const std::filesystem::path dir = troupe::test::fixture("tokenizer");
  for (const char* name : {"gpt-2", "llama-spm"}) {
    auto t = load_fixture(name);
    std::ifstream in(dir / (std::string("ggml-vocab-") + name + ".gguf.inp"), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string all = ss.str(), sep = "\n__ggml_vocab_test__\n";
    size_t n = 0;
    for (size_t pos = 0, next; (next = all.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
      const std::string text = all.substr(pos, next - pos);
      detokenizer d(t);
      EXPECT_EQ(stream(d, t.encode(text)), text) << name << ": '" << text << "'";
      ++n;
    }
    EXPECT_GT(n, 40u) << name;
  }
}

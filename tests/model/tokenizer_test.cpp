#include "model/tokenizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/gguf_reader.hpp"
#include "model/gguf_writer.hpp"
#include "model/detail/tokenizer_utf8.hpp"
#include "model/pretokenizer.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;
using troupe::make_error;
using troupe::result;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// llama.cpp's tokenizer test vectors: every tests/fixtures/tokenizer/ggml-vocab-*.gguf that has
// .inp/.out files. bert-bge is WordPiece, which belongs to the embedder, not to this tokenizer.

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> vocab_fixtures() {
  std::vector<std::string> names;
  const fs::path dir = troupe::test::fixture("tokenizer");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    const std::string prefix = "ggml-vocab-", suffix = ".gguf";
    if (f.size() <= prefix.size() + suffix.size() || f.rfind(prefix, 0) != 0 ||
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string name = f.substr(prefix.size(), f.size() - prefix.size() - suffix.size());
    if (name == "bert-bge") continue;
    if (!fs::exists(dir / (f + ".inp")) || !fs::exists(dir / (f + ".out"))) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Each text in .inp is followed by "\n__ggml_vocab_test__\n"; that newline is not part of it.
std::vector<std::string> split_inputs(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = all.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    texts.push_back(all.substr(pos, next - pos));
  return texts;
}

std::vector<std::vector<int32_t>> parse_outputs(const std::string& all) {
  std::vector<std::vector<int32_t>> lines;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    lines.push_back(std::move(ids));
  }
  return lines;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += static_cast<char>(c);
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (auto id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, MatchLlamaCpp) {
  const std::string base = "ggml-vocab-" + GetParam() + ".gguf";
  const fs::path dir = troupe::test::fixture("tokenizer");
  auto file = gguf_file::open((dir / base).string());
  ASSERT_TRUE(file.ok()) << file.error();
  // Vocabularies of other tokenizer models or pre-tokenizers are skipped, not failed, so
  // llama.cpp's whole models/ folder can be dropped in.
  const std::string model = file.value()->get_string_or("tokenizer.ggml.model", "");
  if (model != "gpt2" && model != "llama")
    GTEST_SKIP() << base << ": tokenizer model '" << model << "' is not supported here";
  if (model == "gpt2") {
    const std::string pre = file.value()->get_string_or("tokenizer.ggml.pre", "");
    if (auto c = pretokenizer_config_for(pre); !c)
      GTEST_SKIP() << base << ": " << c.error();
  }
  auto tok = tokenizer::from_gguf(*file.value());
  ASSERT_TRUE(tok.ok()) << base << ": " << tok.error();

  const auto texts = split_inputs(read_file(dir / (base + ".inp")));
  const auto expected = parse_outputs(read_file(dir / (base + ".out")));
  ASSERT_EQ(texts.size(), expected.size()) << base << ": .inp and .out disagree on the count";
  ASSERT_FALSE(texts.empty());

  size_t matched = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto got = tok->encode(texts[i], /*add_bos=*/false, /*parse_special=*/false);
    if (got == expected[i]) {
      ++matched;
      continue;
    }
    ADD_FAILURE() << base << " text #" << i << " '" << escaped(texts[i]) << "'\n  expected: "
                  << ids_str(expected[i]) << "\n  got:      " << ids_str(got);
  }
  std::printf("[ vectors  ] %s: %zu/%zu texts match\n", base.c_str(), matched, texts.size());
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerVectors, ::testing::ValuesIn(vocab_fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TokenizerVectors);

// ---------------------------------------------------------------------------------------------
// Helpers for the unit tests below.

tokenizer load_fixture(const std::string& name) {
  auto f = gguf_file::open(troupe::test::fixture("tokenizer/ggml-vocab-" + name + ".gguf"));
  EXPECT_TRUE(f.ok()) << f.error();
  auto t = tokenizer::from_gguf(*f.value());
  EXPECT_TRUE(t.ok()) << t.error();
  return std::move(t.value());
}

result<tokenizer> from_writer(const gguf_writer& w) {
  auto f = gguf_file::from_bytes(w.to_bytes());
  if (!f) return make_error(f.error());
  return tokenizer::from_gguf(*f.value());
}

// A tiny byte-level BPE vocabulary: the 256 byte symbols, the given merges (their results
// become tokens too) and extra tokens of the given types.
gguf_writer tiny_bpe(const std::vector<std::string>& merges,
                     const std::vector<std::pair<std::string, int32_t>>& extra = {},
                     const std::string& pre = "gpt2") {
  const auto& alpha = detail::byte_level_alphabet::get();
  std::vector<std::string> tokens(alpha.encode.begin(), alpha.encode.end());
  std::vector<int32_t> types(tokens.size(), 1);
  for (const auto& m : merges) {
    const auto sp = m.find(' ');
    tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
    types.push_back(1);
  }
  for (const auto& [text, type] : extra) {
    tokens.push_back(text);
    types.push_back(type);
  }
  gguf_writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", merges);
  return w;
}

int32_t byte_id(unsigned char c) { return c; }  // tiny_bpe puts byte b at id b

std::vector<std::string> split(const char* pre, std::string_view text) {
  auto c = pretokenizer_config_for(pre);
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = pretokenizer::compile(c.value());
  EXPECT_TRUE(p.ok()) << p.error();
  std::vector<std::string> out;
  for (auto piece : p->split(text)) out.emplace_back(piece);
  return out;
}

using strings = std::vector<std::string>;
using ids = std::vector<int32_t>;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer

TEST(TokenizerPretokenizer, Gpt2SplitsWordsContractionsAndWhitespace) {
  EXPECT_EQ(split("gpt-2", "Hello world's  x\n"),
            (strings{"Hello", " world", "'s", " ", " x", "\n"}));
  EXPECT_EQ(split("gpt2", "a 123!!  "), (strings{"a", " 123", "!!", "  "}));
  EXPECT_TRUE(split("gpt2", "").empty());
}

TEST(TokenizerPretokenizer, SmollmSplitsDigitsOneByOne) {
  EXPECT_EQ(split("smollm", "abc123 def"), (strings{"abc", "1", "2", "3", " def"}));
  EXPECT_EQ(split("starcoder", " 42"), (strings{" ", "4", "2"}));
}

TEST(TokenizerPretokenizer, Llama3GroupsDigitsByThreeAndKeepsNewlines) {
  EXPECT_EQ(split("llama-bpe", "12345"), (strings{"123", "45"}));
  EXPECT_EQ(split("llama3", "Hello\n\nworld"), (strings{"Hello", "\n\n", "world"}));
  EXPECT_EQ(split("llama3", "I'M ok"), (strings{"I", "'M", " ok"}));
}

TEST(TokenizerPretokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "x 2024"), (strings{"x", " ", "2", "0", "2", "4"}));
}

TEST(TokenizerPretokenizer, PiecesCoverUnicodeTextExactly) {
  const std::string text = "Grüße, 世界! 😀😀 ٣٤ \xC2\xA0x";
  for (const char* pre : {"default", "gpt2", "llama3", "qwen2", "smollm"}) {
    std::string joined;
    for (const auto& p : split(pre, text)) joined += p;
    EXPECT_EQ(joined, text) << pre;
  }
}

TEST(TokenizerPretokenizer, UnknownNameIsAnError) {
  auto c = pretokenizer_config_for("no-such-pre");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("no-such-pre"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE

TEST(TokenizerBpe, LowestMergeRankWinsThenLeftmost) {
  // "a b" ranks before "b c": abc -> ab c. Swapped: a bc.
  auto t1 = from_writer(tiny_bpe({"a b", "b c"}));
  ASSERT_TRUE(t1.ok()) << t1.error();
  EXPECT_EQ(t1->encode("abc"), (ids{256, byte_id('c')}));
  auto t2 = from_writer(tiny_bpe({"b c", "a b"}));
  ASSERT_TRUE(t2.ok()) << t2.error();
  EXPECT_EQ(t2->encode("abc"), (ids{byte_id('a'), 256}));
  // Equal ranks: the leftmost pair merges first.
  auto t3 = from_writer(tiny_bpe({"a a"}));
  ASSERT_TRUE(t3.ok()) << t3.error();
  EXPECT_EQ(t3->encode("aaa"), (ids{256, byte_id('a')}));
  // Merges apply within a word only: " a" is its own word.
  EXPECT_EQ(t3->encode("a a"), (ids{byte_id('a'), byte_id(' '), byte_id('a')}));
}

TEST(TokenizerBpe, ByteLevelAlphabetCoversEveryByte) {
  auto t = from_writer(tiny_bpe({}));
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->encode("\x01\n\xC3\xA9"), (ids{1, 10, 0xC3, 0xA9}));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(t->token_to_piece(b), std::string(1, static_cast<char>(b)));
}

TEST(TokenizerBpe, ControlTokensOnlyWhenAskedUserDefinedAlways) {
  auto t = from_writer(tiny_bpe({}, {{"<|ctl|>", 3}, {"<|user|>", 4}}));
  ASSERT_TRUE(t.ok()) << t.error();
  const int32_t ctl = 256, user = 257;
  EXPECT_EQ(t->encode("x<|user|>y"), (ids{'x', user, 'y'}));
  EXPECT_EQ(t->encode("x<|ctl|>y", false, true), (ids{'x', ctl, 'y'}));
  const auto plain = t->encode("x<|ctl|>y", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), ctl), 0);
  EXPECT_EQ(plain.size(), 9u);
  // Shown when decoding: user-defined always, control only when asked.
  EXPECT_EQ(t->decode({'x', user, ctl}), "x<|user|>");
  EXPECT_EQ(t->decode({'x', user, ctl}, true), "x<|user|><|ctl|>");
}

TEST(TokenizerBpe, Gpt2FixtureSpecialTokensBosAndEog) {
  auto t = load_fixture("gpt-2");
  EXPECT_EQ(t.kind(), tokenizer_kind::bpe);
  EXPECT_EQ(t.pre_name(), "gpt2");
  EXPECT_EQ(t.n_vocab(), 50257);
  EXPECT_EQ(t.encode("a<|endoftext|>b", false, true), (ids{64, 50256, 65}));
  EXPECT_EQ(t.encode("a<|endoftext|>b", false, false), (ids{64, 27, 91, 437, 1659, 5239, 91, 29, 65}));
  EXPECT_EQ(t.bos(), 50256);
  EXPECT_EQ(t.encode("a", true), (ids{50256, 64}));
  EXPECT_TRUE(t.is_eog(50256));
  EXPECT_FALSE(t.is_eog(64));
  EXPECT_EQ(t.find_token("Hello"), 15496);
  EXPECT_EQ(t.find_token("no such token"), -1);
  EXPECT_EQ(t.token_to_piece(995), " world");  // stored as "Ġworld"
  EXPECT_EQ(t.token_text(995), "\xC4\xA0world");
  EXPECT_EQ(t.token_to_piece(50256), "");
  EXPECT_EQ(t.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(t.token_to_piece(-1), "");
  EXPECT_EQ(t.token_to_piece(50257), "");
  // Emoji and CJK come out as byte-level pieces that split UTF-8 sequences.
  EXPECT_EQ(t.encode("\xF0\x9F\x98\x80\xF0\x9F\xA6\x99 \xE4\xB8\xAD\xE6\x96\x87"),
            (ids{47249, 222, 8582, 99, 247, 220, 40792, 23877, 229}));
}

TEST(TokenizerBpe, SmolLM2FixtureChatTokens) {
  auto t = load_fixture("smollm2");
  EXPECT_EQ(t.pre_name(), "starcoder");
  const std::string chat = "<|im_start|>user\nHi 2024!<|im_end|>";
  EXPECT_EQ(t.encode(chat, false, true), (ids{1, 4093, 198, 26843, 216, 34, 32, 34, 36, 17, 2}));
  EXPECT_EQ(t.encode(chat, false, false),
            (ids{44, 108, 306, 79, 3738, 108, 46, 4093, 198, 26843, 216, 34, 32, 34, 36, 17, 44,
                 108, 306, 79, 486, 108, 46}));
  EXPECT_TRUE(t.is_eog(2));  // <|im_end|>
  EXPECT_TRUE(t.is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(t.is_eog(1));
  EXPECT_FALSE(t.add_bos_default());
}

TEST(TokenizerBpe, DecodeRoundTripsFixtureTexts) {
  auto t = load_fixture("gpt-2");
  const auto texts =
      split_inputs(read_file(fs::path(troupe::test::fixture("tokenizer")) / "ggml-vocab-gpt-2.gguf.inp"));
  ASSERT_FALSE(texts.empty());
  for (const auto& text : texts) EXPECT_EQ(t.decode(t.encode(text)), text);
}

TEST(TokenizerBpe, InvalidUtf8IsRepairedOrRejected) {
  auto t = load_fixture("smollm2");
  // encode reads each bad byte as U+FFFD, as llama.cpp does (24211 is U+FFFD in this vocab).
  EXPECT_EQ(t.encode("a\xFF" "b"), (ids{81, 24211, 82}));
  EXPECT_EQ(t.encode("x\xE2\x82" "A"), (ids{104, 24211, 24211, 49}));
  auto bad = t.encode_checked("ok \xE2\x82" "A");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("byte offset 3"), std::string::npos) << bad.error();
  EXPECT_FALSE(t.encode_checked("\xC0\x80").ok());         // overlong
  EXPECT_FALSE(t.encode_checked("\xED\xA0\x80").ok());     // surrogate
  EXPECT_FALSE(t.encode_checked("\xF0\x9F\x98").ok());     // truncated at the end
  auto good = t.encode_checked("Hi \xF0\x9F\x98\x80");
  ASSERT_TRUE(good.ok()) << good.error();
  EXPECT_EQ(good.value(), t.encode("Hi \xF0\x9F\x98\x80"));
}

// ---------------------------------------------------------------------------------------------
// SentencePiece BPE

TEST(TokenizerSpm, SpacePrefixByteFallbackAndSpecialTokens) {
  auto t = load_fixture("llama-spm");
  EXPECT_EQ(t.kind(), tokenizer_kind::spm);
  EXPECT_TRUE(t.add_space_prefix());
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.unk(), 0);
  EXPECT_EQ(t.encode("Hello"), (ids{15043}));
  EXPECT_EQ(t.encode("Hello", true), (ids{1, 15043}));
  EXPECT_EQ(t.encode(""), ids{});
  EXPECT_EQ(t.encode("", true), (ids{1}));
  // <s> is a control token: one id when asked, plain text otherwise.
  EXPECT_EQ(t.encode("<s>Hello", false, true), (ids{1, 15043}));
  EXPECT_EQ(t.encode("<s>Hello", false, false), (ids{529, 29879, 29958, 10994}));
  // Text after a special token gets the space prefix again.
  EXPECT_EQ(t.encode("Hi</s> there", false, true), (ids{6324, 2, 29871, 727}));
  // A character missing from the vocabulary is spelled with <0xNN> byte tokens.
  EXPECT_EQ(t.encode("\xF0\x9D\x94\x98"), (ids{29871, 243, 160, 151, 155}));
  EXPECT_EQ(t.token_to_piece(243), "\xF0");
  EXPECT_EQ(t.token_to_piece(15043), " Hello");
  EXPECT_TRUE(t.is_eog(2));
}

TEST(TokenizerSpm, HighestScoreWinsThenLeftmost) {
  auto make = [](float score_ab, float score_bc) {
    gguf_writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc"});
    w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -1, score_ab, score_bc});
    w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1});
    w.set_bool("tokenizer.ggml.add_space_prefix", false);
    auto t = from_writer(w);
    EXPECT_TRUE(t.ok()) << t.error();
    return std::move(t.value());
  };
  EXPECT_EQ(make(-0.5f, -0.7f).encode("abc"), (ids{6, 5}));
  EXPECT_EQ(make(-0.7f, -0.5f).encode("abc"), (ids{3, 7}));
  EXPECT_EQ(make(-0.5f, -0.5f).encode("abc"), (ids{6, 5}));
  // No byte tokens in this vocabulary: unknown characters become <unk>, byte by byte.
  EXPECT_EQ(make(-0.5f, -0.5f).encode("a\xC3\xA9"), (ids{3, 0, 0}));
}

TEST(TokenizerSpm, DecodeDropsTheAddedSpaceOnly) {
  auto t = load_fixture("llama-spm");
  EXPECT_EQ(t.decode(t.encode("Hello world")), "Hello world");
  EXPECT_EQ(t.decode(t.encode("  two spaces")), "  two spaces");
  EXPECT_EQ(t.decode(t.encode("Hello", true)), "Hello");  // bos renders as nothing
  const auto texts = split_inputs(
      read_file(fs::path(troupe::test::fixture("tokenizer")) / "ggml-vocab-llama-spm.gguf.inp"));
  for (const auto& text : texts) EXPECT_EQ(t.decode(t.encode(text)), text);
}

// ---------------------------------------------------------------------------------------------
// Loading errors

TEST(TokenizerLoad, ErrorsNameTheProblem) {
  auto expect_error = [](const gguf_writer& w, const std::string& needle) {
    auto t = from_writer(w);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.error().find(needle), std::string::npos) << t.error();
  };
  gguf_writer empty;
  empty.set_string("general.name", "x");
  expect_error(empty, "tokenizer.ggml.model");

  gguf_writer bert;
  bert.set_string("tokenizer.ggml.model", "bert");
  expect_error(bert, "unsupported tokenizer model 'bert'");

  gguf_writer no_tokens;
  no_tokens.set_string("tokenizer.ggml.model", "llama");
  expect_error(no_tokens, "tokenizer.ggml.tokens");

  auto no_merges = tiny_bpe({});
  no_merges.set_string_array("tokenizer.ggml.merges", {});  // present but empty is fine
  EXPECT_TRUE(from_writer(no_merges).ok());

  gguf_writer missing_merges;
  missing_merges.set_string("tokenizer.ggml.model", "gpt2");
  missing_merges.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  expect_error(missing_merges, "tokenizer.ggml.merges");

  expect_error(tiny_bpe({}, {}, "mystery-pre"), "unsupported pre-tokenizer 'mystery-pre'");

  gguf_writer dup;
  dup.set_string("tokenizer.ggml.model", "llama");
  dup.set_string_array("tokenizer.ggml.tokens", {"a", "b", "a"});
  expect_error(dup, "duplicate token");
}

// Ignored with a warning naming the key and value, as llama.cpp does (tokenizer.cpp's read_id
// says why not refused); -1 is the conventional "none" and passes without a word.
TEST(TokenizerLoad, SpecialIdsOutsideTheVocabularyAreIgnoredWithAWarning) {
  auto w = tiny_bpe({}, {{"<|endoftext|>", 3}});
  const int32_t endoftext = 256;
  w.set_i32("tokenizer.ggml.eos_token_id", 2147483647);
  w.set_u32("tokenizer.ggml.bos_token_id", 257);  // one past the last token
  w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(endoftext));
  w.set_i32("tokenizer.ggml.padding_token_id", -1);
  ::testing::internal::CaptureStderr();
  auto t = from_writer(w);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->eos(), -1);
  EXPECT_EQ(t->bos(), -1);
  EXPECT_TRUE(t->is_eog(endoftext));  // the valid eot id still ends generation
  EXPECT_NE(err.find("tokenizer.ggml.eos_token_id = 2147483647 is outside the vocabulary (0..256); ignored"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("tokenizer.ggml.bos_token_id = 257 is outside the vocabulary (0..256); ignored"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("padding_token_id"), std::string::npos) << err;
}

TEST(TokenizerLoad, CopiesShareTheVocabularyAndWorkAcrossThreads) {
  auto t = load_fixture("gpt-2");
  const tokenizer copy = t;  // cheap: shares the immutable vocabulary
  const std::string text = "Hello world, again and again. 1234";
  const auto expected = t.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k)
        if (copy.encode(text) != expected) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

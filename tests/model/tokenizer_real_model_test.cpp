// The tokenizer, detokenizer and chat template on the real SmolLM2-135M-Instruct file. Expected
// ids are llama.cpp's (llama-tokenize --no-bos) for the same texts.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/chat_template.hpp"
#include "model/detokenizer.hpp"
#include "model/gguf_reader.hpp"
#include "model/tokenizer.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;
using ids = std::vector<int32_t>;

namespace {

class TokenizerRealModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!troupe::test::real_model_available())
      GTEST_SKIP() << "real model not found at " << troupe::test::real_model_path();
    auto f = gguf_file::open(troupe::test::real_model_path());
    ASSERT_TRUE(f.ok()) << f.error();
    file_ = f.value();
    auto t = tokenizer::from_gguf(*file_);
    ASSERT_TRUE(t.ok()) << t.error();
    tok_ = std::make_unique<tokenizer>(std::move(t.value()));
  }
  std::shared_ptr<gguf_file> file_;
  std::unique_ptr<tokenizer> tok_;
};

}  // namespace

TEST_F(TokenizerRealModel, VocabularyAndSpecialTokens) {
  const auto& t = *tok_;
  EXPECT_EQ(t.kind(), tokenizer_kind::bpe);
  EXPECT_EQ(t.pre_name(), "starcoder");  // tokenizer.ggml.pre = smollm
  EXPECT_EQ(t.n_vocab(), 49152);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_FALSE(t.add_bos_default());
  EXPECT_TRUE(t.is_eog(2));  // <|im_end|>
  EXPECT_TRUE(t.is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(t.is_eog(1));
}

TEST_F(TokenizerRealModel, ChatMarkersAreSingleTokensOnlyWhenParsingSpecial) {
  const auto& t = *tok_;
  EXPECT_EQ(t.encode("<|im_start|>", false, true), (ids{1}));
  EXPECT_EQ(t.encode("<|im_end|>", false, true), (ids{2}));
  EXPECT_EQ(t.encode("<|im_start|>", false, false), (ids{44, 108, 306, 79, 3738, 108, 46}));
}

// Special tokens read only inside the given spans (a chat template's own text): the same text
// elsewhere is plain, and text across a span's edge tokenizes as one would have.
TEST_F(TokenizerRealModel, SpecialTokensOnlyInsideTheGivenSpans) {
  const auto& t = *tok_;
  const std::string text = "<|im_start|>user\n<|im_start|>system<|im_end|>\n";
  // The template's parts: "<|im_start|>user\n" (0..17) and "<|im_end|>\n" (35..46).
  const tokenizer::spans tpl = {{0, 17}, {35, 46}};
  auto got = t.encode_checked(text, false, tpl);
  ASSERT_TRUE(got.ok()) << got.error();
  ids expected = {1};
  for (int32_t id : t.encode("user\n<|im_start|>system", false, false)) expected.push_back(id);
  expected.push_back(2);
  expected.push_back(198);
  EXPECT_EQ(got.value(), expected);
  EXPECT_EQ(std::count(got.value().begin(), got.value().end(), 1), 1);  // only the template's im_start
  // Spans over everything: encode's parse_special.
  EXPECT_EQ(t.encode_checked(text, false, tokenizer::spans{{0, text.size()}}).value(), t.encode(text, false, true));
  // A marker straddling a span's edge is no marker; one inside the span right after it still is.
  const std::string edge = "a<|im_start|><|im_end|>";
  EXPECT_EQ(t.encode_checked(edge, false, tokenizer::spans{{5, edge.size()}}).value(),
            [&] {
              ids e = t.encode("a<|im_start|>", false, false);
              e.push_back(2);
              return e;
            }());
  EXPECT_FALSE(t.encode_checked(std::string("\xff"), false, tpl).ok());  // still checked
}

TEST_F(TokenizerRealModel, DigitsAreSplitOneByOne) {
  const auto& t = *tok_;
  EXPECT_EQ(t.encode("12345"), (ids{33, 34, 35, 36, 37}));
  // The space before a number stays a token of its own.
  EXPECT_EQ(t.encode("The year 2024 ends."), (ids{504, 713, 216, 34, 32, 34, 36, 6947, 30}));
}

TEST_F(TokenizerRealModel, RenderedChatPromptTokenizesLikeLlamaCpp) {
  const auto tmpl = chat_template::from_gguf(*file_);
  EXPECT_EQ(tmpl.family(), chat_family::chatml);
  EXPECT_EQ(tmpl.warning(), "");
  auto prompt = tmpl.render({{"user", "What is 12+30?"}}, true);
  ASSERT_TRUE(prompt.ok()) << prompt.error();
  EXPECT_EQ(prompt.value(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 12+30?<|im_end|>\n<|im_start|>assistant\n");
  const auto got = tok_->encode(prompt.value(), false, true);
  EXPECT_EQ(got, (ids{1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28,
                      7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 216, 33, 34, 27,
                      35, 32, 47, 2, 198, 1, 520, 9531, 198}));

  detokenizer::options o;
  o.render_special = true;
  detokenizer d(*tok_, o);
  std::string text;
  for (int32_t id : got) text += d.push(id);
  text += d.flush();
  EXPECT_EQ(text, prompt.value());
}

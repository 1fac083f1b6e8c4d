// Troupe's all-MiniLM-L6-v2 against Hugging Face transformers on PyTorch
// (tests/fixtures/embeddings/minilm_reference.json, made by scripts/make-embedding-reference.sh).
#include "cache/embed/minilm_embedder.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <simdjson.h>

#include "model/gguf_reader.hpp"
#include "tests/support/embedder_paths.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::cache;

namespace {

struct reference_item {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> embedding;
};

std::vector<reference_item> load_reference() {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  auto path = troupe::test::fixture("embeddings/minilm_reference.json");
  if (parser.load(path).get(doc)) throw std::runtime_error("cannot parse " + path);
  std::vector<reference_item> items;
  for (auto s : doc["sentences"].get_array()) {
    reference_item it;
    it.text = std::string(std::string_view(s["text"]));
    for (auto id : s["ids"].get_array()) it.ids.push_back(static_cast<int32_t>(int64_t(id)));
    for (auto x : s["embedding"].get_array()) it.embedding.push_back(static_cast<float>(double(x)));
    items.push_back(std::move(it));
  }
  return items;
}

std::unique_ptr<minilm_embedder> load_embedder(const std::string& weights) {
  embedder_options o;
  o.model_dir = troupe::test::embedder_dir();
  o.weights = weights;
  auto r = minilm_embedder::load(o);
  if (!r) throw std::runtime_error(r.error());
  return std::move(r.value());
}

minilm_embedder& shared_embedder() {
  static std::unique_ptr<minilm_embedder> e = load_embedder(embedder_options().weights);
  return *e;
}

// Cosine of the embedder's vectors to the reference, printed per sentence; the worst one.
float worst_cosine(minilm_embedder& e, const std::vector<reference_item>& items, bool print) {
  float worst = 1.0f;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    auto v = e.embed(it.text);
    EXPECT_TRUE(v.ok()) << v.error();
    if (!v.ok()) return -1;
    EXPECT_EQ(v.value().size(), it.embedding.size());
    const float cos = dot(v.value().data(), it.embedding.data(), static_cast<int>(it.embedding.size()));
    worst = std::min(worst, cos);
    if (print) std::printf("  cos %.7f  %3zu tokens  sentence #%zu\n", cos, it.ids.size(), i);
    EXPECT_GE(cos, 0.999f) << e.name() << ": " << it.text;
  }
  return worst;
}

}  // namespace

TEST(MinilmEmbedder, TokenIdsMatchHuggingFace) {
  TROUPE_REQUIRE_EMBEDDER();
  auto& e = shared_embedder();
  for (const auto& it : load_reference()) EXPECT_EQ(e.token_ids(it.text), it.ids) << it.text;
}

TEST(MinilmEmbedder, CosineToTransformersAtLeast0999) {
  TROUPE_REQUIRE_EMBEDDER();
  const auto items = load_reference();
  ASSERT_GE(items.size(), 20u);
  auto& e = shared_embedder();  // the default weights (f16)
  const float worst = worst_cosine(e, items, true);
  std::printf("MinilmEmbedder %s: %zu sentences, worst cosine %.7f\n", e.name().c_str(), items.size(), worst);
  for (const char* w : {"f32", "q8_0"}) {
    auto other = load_embedder(w);
    std::printf("MinilmEmbedder %s: worst cosine %.7f\n", other->name().c_str(), worst_cosine(*other, items, false));
  }
}

TEST(MinilmEmbedder, BadWeightsOptionIsRefused) {
  TROUPE_REQUIRE_EMBEDDER();
  embedder_options o;
  o.model_dir = troupe::test::embedder_dir();
  o.weights = "int4";
  auto r = minilm_embedder::load(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("'int4'"), std::string::npos) << r.error();
}

TEST(MinilmEmbedder, VocabMatchesTheBgeVocabulary) {
  TROUPE_REQUIRE_EMBEDDER();
  auto mine = wordpiece_tokenizer::from_vocab_file(troupe::test::embedder_dir() + "/vocab.txt");
  ASSERT_TRUE(mine.ok()) << mine.error();
  auto f = troupe::model::gguf_file::open(troupe::test::fixture("tokenizer/ggml-vocab-bert-bge.gguf"));
  ASSERT_TRUE(f.ok());
  auto bge = wordpiece_tokenizer::from_gguf(*f.value());
  ASSERT_TRUE(bge.ok());
  ASSERT_EQ(mine.value().vocab_size(), bge.value().vocab_size());
  for (int32_t i = 0; i < static_cast<int32_t>(mine.value().vocab_size()); ++i)
    ASSERT_EQ(mine.value().token(i), bge.value().token(i)) << "id " << i;
}

TEST(MinilmEmbedder, LoadErrorsNameTheProblem) {
  embedder_options o;
  o.model_dir = "/nonexistent/minilm";
  auto r = minilm_embedder::load(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("config.json"), std::string::npos) << r.error();
}

#pragma once
// `minilm`: sentence-transformers' all-MiniLM-L6-v2 computed in C++ on the CPU. The text is
// WordPiece-tokenized ([CLS] ... [SEP], at most max_tokens), run through the 6-layer BERT
// encoder, mean-pooled over all its tokens and L2-normalised: 384 floats, the model card's recipe.
// Loaded from a folder holding config.json, model.safetensors and vocab.txt
// (scripts/fetch-model.sh puts them in models/all-MiniLM-L6-v2).
#include <memory>
#include <mutex>

#include "cache/embed/bert_model.hpp"
#include "cache/embed/embedder.hpp"
#include "cache/embed/wordpiece_tokenizer.hpp"

namespace troupe::cache {

class minilm_embedder final : public embedder {
 public:
  static result<std::unique_ptr<minilm_embedder>> load(const embedder_options& o);

  // Calls are serialised: the encoder owns one thread pool and one set of scratch buffers.
  result<std::vector<float>> embed(std::string_view text) override;
  bool fits(std::string_view text) const override;
  int dimension() const override { return model_->config().hidden; }
  // Settings that change the vectors are part of the name: stored vectors of another are not reused.
  std::string name() const override { return "minilm/" + std::to_string(max_tokens_) + "/" + weights_; }

  // The ids embed() feeds the encoder, for tests and tools.
  std::vector<int32_t> token_ids(std::string_view text) const;
  // The text's tokens, [CLS] and [SEP] included, however many (embed() reads max_tokens() of them).
  size_t n_tokens(std::string_view text) const;
  int max_tokens() const { return max_tokens_; }

 private:
  minilm_embedder(wordpiece_tokenizer tok, std::unique_ptr<bert_model> model, int n_threads, int max_tokens,
                  std::string weights);

  wordpiece_tokenizer tokenizer_;
  std::unique_ptr<bert_model> model_;
  int max_tokens_;
  std::string weights_;
  std::mutex mu_;
  model::thread_pool pool_;
  std::vector<float> hidden_;
};

}  // namespace troupe::cache

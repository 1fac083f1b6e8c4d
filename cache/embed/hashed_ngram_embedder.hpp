#pragma once
// `hashed_ngrams`: a cheap, deterministic embedder for tests and for machines without the
// MiniLM files. Each word of the BERT-normalised text and each byte trigram of
// "<word>" is hashed (FNV-1a) into one of `dimension` buckets with a hashed sign; the sum is
// L2-normalised. Texts that share most words and spellings come out close; it knows nothing
// of meaning (synonyms are unrelated), so its similarity scale is not MiniLM's.
#include <memory>

#include "cache/embed/embedder.hpp"

namespace troupe::cache {

class hashed_ngram_embedder final : public embedder {
 public:
  explicit hashed_ngram_embedder(int dimension = 384);
  result<std::vector<float>> embed(std::string_view text) override;
  int dimension() const override { return dim_; }
  std::string name() const override;

 private:
  int dim_;
};

}  // namespace troupe::cache

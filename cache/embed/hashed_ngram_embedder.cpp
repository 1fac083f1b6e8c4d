#include "cache/embed/hashed_ngram_embedder.hpp"

#include "cache/embed/bert_text.hpp"

namespace troupe::cache {

namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

hashed_ngram_embedder::hashed_ngram_embedder(int dimension) : dim_(dimension < 1 ? 1 : dimension) {}

std::string hashed_ngram_embedder::name() const { return "hashed_ngrams/" + std::to_string(dim_); }

result<std::vector<float>> hashed_ngram_embedder::embed(std::string_view text) {
  std::vector<float> v(static_cast<size_t>(dim_), 0.0f);
  auto add = [&](std::string_view feature, float weight) {
    const uint64_t h = fnv1a(feature);
    v[static_cast<size_t>(h % static_cast<uint64_t>(dim_))] += (h >> 63) ? -weight : weight;
  };
  for (const auto& w : bert_basic_split(text)) {
    add(w, 2.0f);  // whole words weigh more than their spellings
    const std::string padded = "<" + w + ">";
    for (size_t i = 0; i + 3 <= padded.size(); ++i) add(std::string_view(padded).substr(i, 3), 1.0f);
  }
  if (!l2_normalize(v)) v[0] = 1.0f;  // empty text: a fixed unit vector
  return v;
}

void add_hashed_ngram_embedder(named_registry<embedder_factory>& r) {
  (void)r.add("hashed_ngrams", [](const embedder_options& o) -> result<std::unique_ptr<embedder>> {
    if (o.dimension < 8 || o.dimension > 4096) return make_error("hashed_ngrams: dimension must be in [8, 4096]");
    return std::unique_ptr<embedder>(new hashed_ngram_embedder(o.dimension));
  });
}

}  // namespace troupe::cache

#pragma once
// Turns a prompt's text into a unit-length vector whose inner product with another's says how
// alike their meanings are. Embedders register by name (a duplicate name is an error, an unknown
// one lists those that exist); config names one. Built in: `minilm` (all-MiniLM-L6-v2 on the
// CPU, minilm_embedder.hpp) and `hashed_ngrams` (cheap, deterministic, for tests).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/named_registry.hpp"
#include "common/result.hpp"

namespace troupe::cache {

class embedder {
 public:
  virtual ~embedder() = default;
  // A vector of dimension() floats with L2 norm 1 (or an error). Safe to call from several
  // threads; an implementation may serialise the calls.
  virtual result<std::vector<float>> embed(std::string_view text) = 0;
  // Whether the whole text is seen: false when embed() would cut it to the model's window.
  virtual bool fits(std::string_view /*text*/) const { return true; }
  virtual int dimension() const = 0;
  // Identifies the model and its settings: vectors of different names are not comparable.
  virtual std::string name() const = 0;
};

struct embedder_options {
  std::string model_dir = "models/all-MiniLM-L6-v2";  // minilm: config.json, model.safetensors, vocab.txt
  // minilm: threads of its own pool (0: all cores). One by default: a short question is ~20
  // small matrix products, and on cores the model executor keeps busy, a second thread mostly
  // waits at the barriers.
  int n_threads = 1;
  int max_tokens = 256;       // minilm: longer texts are cut (the model was trained on 256)
  // minilm: how the weight matrices are held: f32 as stored, f16 (half the memory traffic; its
  // worst cosine to the transformers reference is as good as f32's, 0.9999995) or q8_0 (faster
  // still, worst cosine 0.9992).
  std::string weights = "f16";
  int dimension = 384;        // hashed_ngrams: vector size
};

using embedder_factory = std::function<result<std::unique_ptr<embedder>>(const embedder_options&)>;

// The process-wide registry of embedders, holding the built-ins from its first use.
named_registry<embedder_factory>& embedder_registry();

// Built-ins, added by embedder_registry().
void add_minilm_embedder(named_registry<embedder_factory>& r);
void add_hashed_ngram_embedder(named_registry<embedder_factory>& r);

// Scales v to unit L2 norm in place; false when v is all zeros (left as is).
bool l2_normalize(std::vector<float>& v);
// Inner product: the cosine for unit vectors.
float dot(const float* a, const float* b, int n);

}  // namespace troupe::cache

#include "cache/embed/embedder.hpp"

#include <cmath>

namespace troupe::cache {

named_registry<embedder_factory>& embedder_registry() {
  static auto* r = new named_registry<embedder_factory>("embedder", {add_minilm_embedder, add_hashed_ngram_embedder});
  return *r;
}

bool l2_normalize(std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  if (ss <= 0) return false;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (float& x : v) x *= inv;
  return true;
}

float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace troupe::cache

#include "cache/embedder.hpp"

#include <cmath>

namespace troupe::cache {

embedder_registry& embedder_registry::global() {
  static embedder_registry* r = [] {
    auto* reg = new embedder_registry();
    add_minilm_embedder(*reg);
    add_hashed_ngram_embedder(*reg);
    return reg;
  }();
  return *r;
}

status embedder_registry::add(const std::string& name, embedder_factory f) {
  std::lock_guard<std::mutex> lock(mu_);
  if (factories_.count(name)) return make_error("embedder '" + name + "' is registered twice");
  factories_[name] = std::move(f);
  return {};
}

result<std::unique_ptr<embedder>> embedder_registry::make(const std::string& name, const embedder_options& o) const {
  embedder_factory f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      std::string known;
      for (const auto& [n, _] : factories_) known += (known.empty() ? "" : ", ") + n;
      return make_error("unknown embedder '" + name + "' (known: " + known + ")");
    }
    f = it->second;
  }
  return f(o);
}

std::vector<std::string> embedder_registry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [n, _] : factories_) out.push_back(n);
  return out;
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

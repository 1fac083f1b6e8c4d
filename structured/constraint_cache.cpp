#include "structured/constraint_cache.hpp"

namespace troupe::structured {

constraint_cache::constraint_cache(std::function<std::shared_ptr<const token_vocabulary>()> make_vocabulary,
                                   size_t capacity)
    : make_vocabulary_(std::move(make_vocabulary)), capacity_(capacity == 0 ? 1 : capacity) {}

std::shared_ptr<const token_vocabulary> constraint_cache::vocabulary() {
  std::call_once(vocab_once_, [this] { vocab_ = make_vocabulary_(); });
  return vocab_;
}

result<std::shared_ptr<const compiled_constraint>> constraint_cache::get(const constraint_spec& spec) {
  std::string key = spec.kind;
  key += '\0';
  key += spec.source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto vocab = vocabulary();
  if (!vocab) return make_error("structured outputs need the model's vocabulary, which this codec does not have");
  // Compiled outside the lock: a large schema takes a while, and others may use the cache meanwhile.
  auto c = compile(spec, vocab);
  if (!c) return c;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second->second;  // compiled twice at once
  lru_.emplace_front(key, *c);
  by_key_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    by_key_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return *c;
}

}  // namespace troupe::structured

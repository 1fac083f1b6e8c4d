#include "cache/exact/exact_cache.hpp"

namespace troupe::cache {

bool exact_cache::cacheable(const cache_query& q) {
  if (q.cache == cache_choice::refused) return false;
  const auto& p = q.sampling;
  return (p.temperature <= 0.0f || p.seed != 0) && p.n_logprobs == 0;
}

const cached_answer* exact_cache::lookup(const cache_query& q) {
  if (!cfg_.enabled || !cacheable(q)) return nullptr;
  ++st_.lookups;
  auto key = exact_key(q);
  auto it = index_.find(key);
  if (it != index_.end()) {
    ++st_.hits;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->second;
  }
  pending_[q.id] = std::move(key);
  pending_order_.push_back(q.id);
  // Closes can be lost when a streamer restarts; keep the memory of misses bounded.
  while (pending_order_.size() > 4 * cfg_.max_entries + 1024) {
    pending_.erase(pending_order_.front());
    pending_order_.pop_front();
  }
  return nullptr;
}

void exact_cache::on_closed(const finished_answer& a) {
  auto it = pending_.find(a.id);
  if (it == pending_.end()) return;
  std::string key = std::move(it->second);
  pending_.erase(it);
  if (!a.complete()) return;
  put(key, cached_answer{a.tokens, a.logprobs, a.finish_reason});
}

void exact_cache::put(const std::string& key, cached_answer e) {
  if (cfg_.max_entries == 0) return;
  if (auto it = index_.find(key); it != index_.end()) {
    it->second->second = std::move(e);
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.emplace_front(key, std::move(e));
  index_[key] = lru_.begin();
  ++st_.stores;
  while (lru_.size() > cfg_.max_entries) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

exact_cache_stats exact_cache::stats() const {
  auto s = st_;
  s.entries = static_cast<int64_t>(lru_.size());
  return s;
}

}  // namespace troupe::cache

#include "actors/exact_cache.hpp"

#include <cstring>

namespace troupe::actors {

namespace {
template <class T>
void put_raw(std::string& k, const T& v) {
  k.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& k, const std::string& s) {
  put_raw(k, static_cast<uint64_t>(s.size()));
  k += s;
}
template <class T>
void put_vec(std::string& k, const std::vector<T>& v) {
  put_raw(k, static_cast<uint64_t>(v.size()));
  if (!v.empty()) k.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
}  // namespace

bool exact_cache::cacheable(const admitted_request& r) {
  const auto& p = r.sampling;
  return (p.temperature <= 0.0f || p.seed != 0) && p.n_logprobs == 0;
}

std::string exact_cache::key_of(const admitted_request& r) {
  std::string k;
  put_str(k, r.model);
  put_vec(k, r.prompt);
  const auto& p = r.sampling;
  put_raw(k, p.temperature);
  put_raw(k, p.top_k);
  put_raw(k, p.top_p);
  put_raw(k, p.min_p);
  put_raw(k, p.repetition_penalty);
  put_raw(k, p.frequency_penalty);
  put_raw(k, p.presence_penalty);
  put_raw(k, p.penalty_last_n);
  put_raw(k, p.seed);
  put_raw(k, r.max_tokens);
  put_raw(k, r.logprobs);
  put_raw(k, static_cast<uint64_t>(r.stop.size()));
  for (const auto& s : r.stop) put_str(k, s);
  put_vec(k, r.eog);
  return k;
}

const cache_entry* exact_cache::lookup(const admitted_request& r) {
  if (!cfg_.enabled || !cacheable(r)) return nullptr;
  ++st_.lookups;
  auto key = key_of(r);
  auto it = index_.find(key);
  if (it != index_.end()) {
    ++st_.hits;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->second;
  }
  pending_[r.id] = std::move(key);
  pending_order_.push_back(r.id);
  // Closes can be lost when a streamer restarts; keep the memory of misses bounded.
  while (pending_order_.size() > 4 * cfg_.max_entries + 1024) {
    pending_.erase(pending_order_.front());
    pending_order_.pop_front();
  }
  return nullptr;
}

void exact_cache::on_closed(const closed_stream& c) {
  auto it = pending_.find(c.id);
  if (it == pending_.end()) return;
  std::string key = std::move(it->second);
  pending_.erase(it);
  if (c.cached || c.filtered || (c.finish_reason != finish::stop && c.finish_reason != finish::length)) return;
  put(key, cache_entry{c.tokens, c.logprobs, c.finish_reason});
}

void exact_cache::put(const std::string& key, cache_entry e) {
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

cache_stats exact_cache::stats() const {
  auto s = st_;
  s.entries = static_cast<int64_t>(lru_.size());
  return s;
}

}  // namespace troupe::actors

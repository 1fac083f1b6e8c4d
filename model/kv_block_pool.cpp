#include "model/kv_block_pool.hpp"

#include <cassert>
#include <stdexcept>

namespace troupe::model {

kv_block_pool::kv_block_pool(int32_t n_blocks)
    : n_blocks_(n_blocks),
      ref_(static_cast<size_t>(n_blocks), 0),
      lru_pos_(static_cast<size_t>(n_blocks)),
      in_lru_(static_cast<size_t>(n_blocks), false) {
  free_.reserve(static_cast<size_t>(n_blocks));
  // Hand out low ids first: easier to read in logs and tests.
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

std::optional<int32_t> kv_block_pool::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    lru_.pop_front();
    in_lru_[static_cast<size_t>(id)] = false;
    forget_hash(id);
  } else {
    return std::nullopt;
  }
  ref_[static_cast<size_t>(id)] = 1;
  return id;
}

void kv_block_pool::retain(int32_t id) {
  auto i = static_cast<size_t>(id);
  if (in_lru_[i]) {
    lru_.erase(lru_pos_[i]);
    in_lru_[i] = false;
  }
  ++ref_[i];
}

void kv_block_pool::release(int32_t id) {
  auto i = static_cast<size_t>(id);
  if (ref_[i] <= 0) throw std::logic_error("kv_block_pool: release of unreferenced block " + std::to_string(id));
  if (--ref_[i] > 0) return;
  if (hash_of_.count(id)) {
    lru_pos_[i] = lru_.insert(lru_.end(), id);
    in_lru_[i] = true;
  } else {
    free_.push_back(id);
  }
}

void kv_block_pool::set_hash(int32_t id, uint64_t hash) {
  if (by_hash_.count(hash)) return;  // an identical block is already cached; keep the first
  forget_hash(id);
  by_hash_[hash] = id;
  hash_of_[id] = hash;
}

std::optional<int32_t> kv_block_pool::acquire_cached(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  retain(it->second);
  return it->second;
}

void kv_block_pool::forget_hash(int32_t id) {
  auto it = hash_of_.find(id);
  if (it == hash_of_.end()) return;
  by_hash_.erase(it->second);
  hash_of_.erase(it);
}

uint64_t block_hash(uint64_t prev, const int32_t* tokens, int32_t n) {
  // FNV-1a over the previous hash and the token ids, then a final avalanche (splitmix64).
  uint64_t h = 1469598103934665603ull ^ prev;
  for (int32_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace troupe::model

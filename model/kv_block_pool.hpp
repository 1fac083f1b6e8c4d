#pragma once
// Bookkeeping of paged KV blocks: ids, refcounts, a free list and a prefix-hash index with LRU
// eviction of cached blocks nobody references. No tensors: the memory lives in the backend.
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace troupe::model {

class kv_block_pool {
 public:
  explicit kv_block_pool(int32_t n_blocks);

  int32_t size() const { return n_blocks_; }
  // Blocks that can be handed out now: never used, or cached but unreferenced (evictable).
  int32_t available() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t referenced() const { return n_blocks_ - available(); }
  int32_t cached() const { return static_cast<int32_t>(hash_of_.size()); }

  // A fresh block with refcount 1, evicting the least recently used cached block when the free
  // list is empty; nothing when every block is referenced.
  std::optional<int32_t> allocate();
  void retain(int32_t id);
  // Drops one reference; at zero the block stays cached (if it has a hash) or becomes free.
  void release(int32_t id);
  int32_t refcount(int32_t id) const { return ref_[static_cast<size_t>(id)]; }

  // Marks a full block as holding the tokens identified by `hash` (chained over the prefix).
  void set_hash(int32_t id, uint64_t hash);
  // A cached block with that prefix hash, retained for the caller; nothing on a miss.
  std::optional<int32_t> acquire_cached(uint64_t hash);
  bool contains(uint64_t hash) const { return by_hash_.count(hash) != 0; }

 private:
  void forget_hash(int32_t id);
  int32_t n_blocks_;
  std::vector<int32_t> ref_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // unreferenced cached blocks, least recently used first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::unordered_map<int32_t, uint64_t> hash_of_;
};

// Hash of one full block of token ids, chained with the hash of the block before it.
uint64_t block_hash(uint64_t prev, const int32_t* tokens, int32_t n);

}  // namespace troupe::model

#include "model/kv_manager.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::model {

kv_manager::kv_manager(int32_t n_blocks, int32_t block_size, bool prefix_caching)
    : pool_(n_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {}

uint64_t kv_manager::hash_of(uint64_t prev, const int32_t* tokens, int32_t block, int32_t n_prompt) const {
  // Prompt positions in the block: 0 when the prompt has fewer than 2 tokens (computed like
  // decoded ones).
  const int32_t in_prompt = n_prompt < 2 ? 0 : std::max(0, std::min(block_size_, n_prompt - block * block_size_));
  return block_hash(prev, tokens, block_size_) ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(in_prompt + 1));
}

int32_t kv_manager::add_sequence(uint64_t seq, const std::vector<int32_t>& prompt, int32_t n_prompt) {
  if (seqs_.count(seq)) throw std::logic_error("kv_manager: sequence added twice");
  auto& s = seqs_[seq];
  s.n_prompt = n_prompt < 0 ? static_cast<int32_t>(prompt.size()) : n_prompt;
  if (!prefix_caching_ || prompt.empty()) return 0;
  const auto max_blocks = static_cast<int32_t>((prompt.size() - 1) / static_cast<size_t>(block_size_));
  uint64_t h = 0;
  for (int32_t b = 0; b < max_blocks; ++b) {
    h = hash_of(h, prompt.data() + static_cast<size_t>(b) * block_size_, b, s.n_prompt);
    auto id = pool_.acquire_cached(h);
    if (!id) break;
    s.blocks.push_back(*id);
    s.hashes.push_back(h);
  }
  s.n_tokens = static_cast<int32_t>(s.blocks.size()) * block_size_;
  return s.n_tokens;
}

int32_t kv_manager::blocks_needed(uint64_t seq, int32_t n_tokens) const {
  const auto& s = seqs_.at(seq);
  int32_t need = (n_tokens + block_size_ - 1) / block_size_;
  return std::max(0, need - static_cast<int32_t>(s.blocks.size()));
}

bool kv_manager::reserve(uint64_t seq, int32_t n_tokens) {
  auto& s = seqs_.at(seq);
  int32_t need = blocks_needed(seq, n_tokens);
  if (need > pool_.available()) return false;
  for (int32_t i = 0; i < need; ++i) s.blocks.push_back(*pool_.allocate());
  if (n_tokens > s.n_tokens) s.n_tokens = n_tokens;
  return true;
}

void kv_manager::commit(uint64_t seq, const std::vector<int32_t>& tokens, int32_t n_computed) {
  if (!prefix_caching_) return;
  auto& s = seqs_.at(seq);
  auto full = std::min<size_t>(static_cast<size_t>(n_computed) / static_cast<size_t>(block_size_), s.blocks.size());
  full = std::min(full, tokens.size() / static_cast<size_t>(block_size_));
  while (s.hashes.size() < full) {
    size_t b = s.hashes.size();
    uint64_t prev = b ? s.hashes.back() : 0;
    uint64_t h = hash_of(prev, tokens.data() + b * static_cast<size_t>(block_size_), static_cast<int32_t>(b), s.n_prompt);
    pool_.set_hash(s.blocks[b], h);
    s.hashes.push_back(h);
  }
}

void kv_manager::truncate(uint64_t seq, int32_t n_tokens) {
  auto& s = seqs_.at(seq);
  if (n_tokens < 0 || n_tokens >= s.n_tokens) return;
  const auto keep = static_cast<size_t>((n_tokens + block_size_ - 1) / block_size_);
  while (s.blocks.size() > keep) {
    pool_.release(s.blocks.back());
    s.blocks.pop_back();
  }
  // A hashed block wholly below n_tokens stays hashed (its tokens are all kept); one reaching
  // past it cannot be hashed (only full, computed blocks are), but drop such hashes all the same.
  const auto full = static_cast<size_t>(n_tokens / block_size_);
  if (s.hashes.size() > full) s.hashes.resize(full);
  s.n_tokens = n_tokens;
}

void kv_manager::free_sequence(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Release the tail first so that the LRU evicts a chain's last blocks before its first ones.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) pool_.release(*b);
  seqs_.erase(it);
}

const std::vector<int32_t>& kv_manager::block_table(uint64_t seq) const { return seqs_.at(seq).blocks; }

int32_t kv_manager::tokens_of(uint64_t seq) const { return seqs_.at(seq).n_tokens; }

kv_usage kv_manager::usage() const {
  kv_usage u;
  u.blocks_total = pool_.size();
  u.blocks_used = pool_.referenced();
  u.blocks_cached = pool_.cached();
  for (const auto& [id, s] : seqs_) {
    u.tokens_stored += s.n_tokens;
    u.slots_wasted += static_cast<int64_t>(s.blocks.size()) * block_size_ - s.n_tokens;
  }
  return u;
}

}  // namespace troupe::model

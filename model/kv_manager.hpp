#pragma once
// Per-sequence block tables over a kv_block_pool: answers "make room for n tokens of this
// sequence" with yes or no (then the caller preempts someone), and shares full blocks between
// sequences with the same token prefix (automatic prefix caching).
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "model/kv_block_pool.hpp"

namespace troupe::model {

struct kv_usage {
  int32_t blocks_total = 0;
  int32_t blocks_used = 0;      // referenced by at least one sequence
  int32_t blocks_cached = 0;    // holding a hashed prefix (used or evictable)
  int64_t tokens_stored = 0;    // sum over sequences of their token counts
  int64_t slots_wasted = 0;     // unused slots in the sequences' last, partly filled blocks
};

class kv_manager {
 public:
  kv_manager(int32_t n_blocks, int32_t block_size, bool prefix_caching = true);

  int32_t block_size() const { return block_size_; }
  const kv_block_pool& pool() const { return pool_; }

  // Starts a sequence. With prefix caching, takes cached blocks matching the longest prefix of
  // full blocks of `prompt` (leaving at least one prompt token to compute) and returns how many
  // prompt tokens they cover.
  // `n_prompt` (-1: all of `prompt`) is how many of the tokens are the request's prompt: a
  // block's hash also says which of its positions were prompt positions, because those are
  // computed in llama.cpp's prompt-batch order (batch_sequence::n_prompt), so a block is shared
  // only where its KV is bit for bit what this sequence would compute.
  int32_t add_sequence(uint64_t seq, const std::vector<int32_t>& prompt, int32_t n_prompt = -1);
  bool has_sequence(uint64_t seq) const { return seqs_.count(seq) != 0; }

  // Blocks needed to grow `seq` to n_tokens in total (0 when it already fits).
  int32_t blocks_needed(uint64_t seq, int32_t n_tokens) const;
  // Grows the block table to cover n_tokens; all or nothing.
  bool reserve(uint64_t seq, int32_t n_tokens);

  // Declares the KV of tokens[0, n_computed) written: full blocks become shareable.
  void commit(uint64_t seq, const std::vector<int32_t>& tokens, int32_t n_computed);

  // Shrinks the sequence to its first n_tokens (speculative decoding: the positions past them
  // held rejected guesses): the blocks wholly past them go back to the pool, and no block hash
  // covers a position past them (commit hashes only full blocks below what it is told is
  // computed, so rejected tokens are never hashed). Growing is reserve's job: a larger n_tokens
  // changes nothing.
  void truncate(uint64_t seq, int32_t n_tokens);

  // Releases the sequence's blocks (cached ones stay evictable in the pool).
  void free_sequence(uint64_t seq);

  const std::vector<int32_t>& block_table(uint64_t seq) const;
  int32_t tokens_of(uint64_t seq) const;
  kv_usage usage() const;

 private:
  struct seq_state {
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;   // hashes of the leading full blocks already registered
    int32_t n_tokens = 0;           // tokens whose slots are reserved and in use
    int32_t n_prompt = 0;
  };
  uint64_t hash_of(uint64_t prev, const int32_t* tokens, int32_t block, int32_t n_prompt) const;
  kv_block_pool pool_;
  int32_t block_size_;
  bool prefix_caching_;
  std::unordered_map<uint64_t, seq_state> seqs_;
};

}  // namespace troupe::model

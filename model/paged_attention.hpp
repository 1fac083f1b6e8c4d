#pragma once
// Attention of one query token against its sequence's paged KV memory (fp16 K and V stored per
// block as [kv_head][slot][head_dim]); a sequence reads only its own blocks.
#include <cstdint>

namespace troupe::model {

struct kv_layer_view {
  uint16_t* k = nullptr;       // this layer's K blocks
  uint16_t* v = nullptr;       // this layer's V blocks
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int64_t block_stride() const { return static_cast<int64_t>(n_kv_heads) * block_size * head_dim; }
  uint16_t* k_at(int32_t block, int kv_head, int slot) const {
    return k + block * block_stride() + (static_cast<int64_t>(kv_head) * block_size + slot) * head_dim;
  }
  uint16_t* v_at(int32_t block, int kv_head, int slot) const {
    return v + block * block_stride() + (static_cast<int64_t>(kv_head) * block_size + slot) * head_dim;
  }
};

// Stores one token's K and V (n_kv_heads * head_dim floats each) at position `pos`.
void kv_store(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, const float* k, const float* v);

// For the query heads [g * group, (g + 1) * group) that share KV head g, attends over positions
// [0, n_ctx) and writes their outputs. q and out point at the token's first head.
// scratch must hold n_ctx * group floats.
void paged_attention_group(const float* q, const kv_layer_view& kv, const int32_t* block_table,
                           int32_t n_ctx, int kv_head, int group, float scale, float* out, float* scratch);

}  // namespace troupe::model

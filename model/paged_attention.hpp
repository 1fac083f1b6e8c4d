#pragma once
// Attention of one query token against its sequence's paged KV memory (K and V stored per block
// as [kv_head][slot][head_dim], in fp16, f32 or q8, K optionally by column: see kv_layer_view);
// a sequence reads only its own blocks.
#include <cstddef>
#include <cstdint>

namespace troupe::model {

// q8: each row (one token's head_dim values of one KV head) as int8 with one float scale,
// value = q * scale, scale = max |x| / 127: about half of fp16's memory.
enum class kv_dtype { f16, f32, q8 };

// Bytes of one stored value (q8's scales aside).
inline size_t kv_elem_size(kv_dtype t) { return t == kv_dtype::f16 ? 2 : t == kv_dtype::q8 ? 1 : 4; }

struct kv_layer_view {
  void* k = nullptr;           // this layer's K blocks
  void* v = nullptr;           // this layer's V blocks
  kv_dtype dtype = kv_dtype::f16;
  float* k_scale = nullptr;    // q8: this layer's row scales, row r's at offset(r) / head_dim
  float* v_scale = nullptr;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  size_t elem_size() const { return kv_elem_size(dtype); }
  int64_t block_stride() const { return static_cast<int64_t>(n_kv_heads) * block_size * head_dim; }
  // K by column (the fast kernel's layout, fp16 and q8 only): a (block, kv head)'s region (the
  // same bytes as its rows) holds the block's slots side by side for each value, so one load
  // reads 16 positions. fp16: [head_dim][block_size]; q8: [head_dim / 4][block_size][4] codes
  // stored + 128 as unsigned bytes (4 values of a position per 32-bit lane, as VPDPBUSD reads them).
  bool k_by_column = false;
  int64_t offset(int32_t block, int kv_head, int slot) const {
    return block * block_stride() + (static_cast<int64_t>(kv_head) * block_size + slot) * head_dim;
  }
  // Values of a position that lie side by side in K by column (1 for fp16, 4 for q8).
  int k_column_width() const { return dtype == kv_dtype::q8 ? 4 : 1; }
  // Where value d of (block, kv_head, slot) lies in K.
  int64_t k_index(int32_t block, int kv_head, int slot, int d) const {
    if (!k_by_column || dtype == kv_dtype::f32) return offset(block, kv_head, slot) + d;
    const int w = k_column_width();
    return offset(block, kv_head, 0) + static_cast<int64_t>(d / w) * block_size * w + slot * w + d % w;
  }
};

// Whether this CPU attends over q8 K/V at this head size (AVX2 or AVX-512, head size 64 or 128): q8
// memory has only the fast order's kernel, which paged_attention_group then always uses.
bool kv_q8_supported(int head_dim);

// Whether K memory of this type is laid out by column: for q8 whenever head_dim is a multiple of 4
// (the layout's groups), for fp16 when the fast order runs its fast kernel on this CPU (the
// llama.cpp orders read rows); never for f32. Views laid out otherwise still attend correctly
// (through plain loops), but only these are fast.
bool kv_k_by_column(kv_dtype dtype, int head_dim, bool fast_order);

// Stores one token's K and V (n_kv_heads * head_dim floats each) at position `pos`.
void kv_store(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, const float* k, const float* v);
// Stores one KV head's K row and/or V row (head_dim floats; either may be null) of the token at
// `pos`: the same bytes kv_store writes for that head.
void kv_store_head(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, int kv_head, const float* k,
                   const float* v);

// Which llama.cpp kernel's summation order the weighted sum of V follows (ggml's CPU backend
// runs tinyBLAS for a KQV product over >= 2 query tokens, ggml_vec_dot_f32 for one).
enum class attention_order {
  single,  // the query is the only token of its step (decode)
  batch,   // the query is one of several tokens of its step (prompt)
  fast,    // no llama.cpp order (with matmul_order::fast; AVX2 or AVX-512, head size 64 or 128,
           // else single): scores 16 positions at a time, each output value one FMA chain over
           // positions; the same for every query, and the same bits on either ISA
           // (model/attention_avx512.cpp, model/attention_avx2.cpp)
};

// For the query heads [g * group, (g + 1) * group) that share KV head g, attends over positions
// [0, n_ctx) and writes their outputs. q and out point at the token's first head.
// scratch must hold n_ctx * group floats.
void paged_attention_group(const float* q, const kv_layer_view& kv, const int32_t* block_table,
                           int32_t n_ctx, int kv_head, int group, float scale, float* out, float* scratch,
                           attention_order order = attention_order::single);

// A query over many positions in parts (the fast kernel only): on 2 threads and 3 KV heads one
// thread would otherwise attend two heads while the other waits for it; in parts of whole blocks
// the work spreads evenly, and a long context's parts keep both threads busy at any batch size.
// Each part's heads are normalised over its own positions, with their score max and softmax sum
// kept; merge_attention_parts() weighs the parts by them. The split depends only on the view, the
// order and n_ctx, never on the batch: a query gets the same arithmetic wherever it is computed
// (a decode step, a verified speculative position, a prompt chunk).
struct attention_split {
  int n_parts = 1;
  int32_t part_len = 0;  // positions per part (a multiple of the block size), the last one fewer
};
attention_split split_attention(const kv_layer_view& kv, attention_order order, int32_t n_ctx);

// Part `part` of `split` of paged_attention_group's query: the group's outputs over that part's
// positions into out_part (group * head_dim floats), each head's (max, sum) into stats (2 * group).
// Only where split_attention() split (the fast kernel runs).
void paged_attention_part(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                          int kv_head, int group, float scale, const attention_split& split, int part, float* out_part,
                          float* stats, float* scratch);

// The group's outputs (out: group * head_dim floats) from n_parts parts laid end to end (outputs
// group * head_dim floats each, stats 2 * group each), in part order.
void merge_attention_parts(const float* parts, const float* stats, int n_parts, int group, int head_dim, float* out);

}  // namespace troupe::model

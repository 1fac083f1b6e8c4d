#pragma once
// The fast order's attention kernel for AVX-512 CPUs (model/attention_avx512.cpp, built with
// AVX-512 flags; paged_attention.cpp checks the CPU before calling it).
#include <cstdint>

#include "model/paged_attention.hpp"

namespace troupe::model::detail {

// Head sizes the kernel is built for.
inline bool attend_avx512_fits(const kv_layer_view& kv) { return kv.head_dim == 64 || kv.head_dim == 128; }

// q8 K/V's row quantization (paged_attention.cpp's q8 store, the same codes and scale) for n a
// multiple of 16.
void quantize_row_q8(const float* x, int n, int8_t* codes, float* scale);

// merge_attention_parts (paged_attention.hpp) for head sizes the kernel is built for.
void merge_parts_avx512(const float* parts, const float* stats, int n_parts, int group, int head_dim, float* out);

// paged_attention_group's query for one KV head's group in the fast order: scores 16 positions
// at a time (each position's products summed lane-wise, then the 16 sums transposed out of one
// register), softmax, then V weighed for up to 4 heads per pass with one FMA chain per output
// value. Writes the group's outputs at og
// (group * head_dim floats) and, when stats is not null, each head's score max and softmax sum at
// stats[2h], stats[2h + 1] (a part of a split query: paged_attention_part).
void attend_avx512_group(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                         int kv_head, int group, float scale, float* og, float* scratch, float* stats);

}  // namespace troupe::model::detail

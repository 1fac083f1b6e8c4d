#pragma once
// The fast order's attention kernel for AVX2 CPUs (model/attention_avx2.cpp, built with AVX2 +
// FMA + F16C flags; paged_attention.cpp checks the CPU before calling it). It computes what
// model/attention_avx512.cpp computes, bit for bit: every lane's arithmetic in the same order
// (tests/model/paged_attention_test.cpp holds both to a plain statement of that order).
#include <cstdint>

#include "model/paged_attention.hpp"

namespace troupe::model::detail {

// Head sizes the kernel is built for (those of the AVX-512 kernel).
inline bool attend_avx2_fits(const kv_layer_view& kv) { return kv.head_dim == 64 || kv.head_dim == 128; }

// quantize_row_q8 (attention_avx512.hpp) with 256-bit registers: the same codes and scale.
void quantize_row_q8_avx2(const float* x, int n, int8_t* codes, float* scale);

// attend_avx512_group's contract: the group's outputs at og and, when stats is not null, each
// head's score max and softmax sum at stats[2h], stats[2h + 1].
void attend_avx2_group(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
                       int group, float scale, float* og, float* scratch, float* stats);

// merge_parts_avx512's contract.
void merge_parts_avx2(const float* parts, const float* stats, int n_parts, int group, int head_dim, float* out);

}  // namespace troupe::model::detail

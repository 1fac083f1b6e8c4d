#pragma once
// The fast attention kernels' prefetching of K/V rows (model/attention_avx512.cpp,
// model/attention_avx2.cpp): SSE's prefetch only. In an anonymous namespace, as the kernels'
// other shared helpers, so that each kernel file keeps its own copy built with its own flags.
#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

#include "model/paged_attention.hpp"

namespace troupe::model::detail {
namespace {

// Rows k_ahead_bytes on are fetched while this one is read: a KV head's rows are contiguous only
// within a block, and blocks lie anywhere in the pool, so the hardware prefetcher restarts at
// every block; one row per position (2 lines at 64 fp16 values, 1 in q8) spreads the requests.
// A fixed distance in bytes keeps as many lines in flight whatever the row's size. 8 KB: batch 16
// over fp16 K/V ~8% faster than 4 KB on a Zen 5 EPYC (troupe_attention_bench, 3 alternating runs),
// batch 1 the same; 16 KB no better than 8.
constexpr int32_t k_ahead_bytes = 8192;

// Each line of a row of Bytes, as straight-line code (GCC 12 dropped the prefetches when they
// were written as a loop; troupe_attention_bench shows the difference).
template <size_t Off, size_t Bytes>
inline void prefetch_lines(const char* p) {
  _mm_prefetch(p + Off, _MM_HINT_T0);
  if constexpr (Off + 64 < Bytes) prefetch_lines<Off + 64, Bytes>(p);
}

template <int HD, class T>
inline void prefetch_row(const T* row) {
  prefetch_lines<0, HD * sizeof(T)>(reinterpret_cast<const char*>(row));
}

// The rows k_ahead positions past a walk over K's rows of the context and then V's, one position
// per next(), and (q8) their scales, a line of 16 at a time. The first k_ahead rows of K are
// fetched when the walk starts, and V's first rows while K's last are read, so neither pass starts
// on rows not yet asked for. The block and slot advance by counting (no division per position).
template <int HD, class T>
struct prefetch_cursor {
  static constexpr int32_t k_ahead = k_ahead_bytes / (HD * sizeof(T));
  const kv_layer_view& kv;
  const int32_t* block_table;
  int kv_head;
  int32_t n_ctx;
  const T* base;        // the rows being fetched: K's, then V's
  const float* scales;  // q8: their scales (they lie apart from the codes), else null
  const T* v_base;
  const float* v_scales;
  int32_t pos = 0, block = 0, slot = 0;  // the next row to fetch
  bool done = false;
  prefetch_cursor(const kv_layer_view& v, const int32_t* bt, int h, int32_t n, const T* k, const float* k_sc,
                  const T* vb, const float* v_sc)
      : kv(v), block_table(bt), kv_head(h), n_ctx(n), base(k), scales(k_sc), v_base(vb), v_scales(v_sc) {
    for (int32_t i = 0; i < k_ahead; ++i) next();
  }
  void next() {
    if (done) return;
    const int64_t off = kv.offset(block_table[block], kv_head, slot);
    prefetch_row<HD>(base + off);
    if (scales && slot % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(scales + off / HD), _MM_HINT_T0);
    if (++slot == kv.block_size) {
      slot = 0;
      ++block;
    }
    if (++pos < n_ctx) return;
    if (base == v_base) {
      done = true;
      return;
    }
    base = v_base;
    scales = v_scales;
    pos = block = slot = 0;
  }
};

}  // namespace
}  // namespace troupe::model::detail

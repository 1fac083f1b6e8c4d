// Decode attention over paged KV at SmolLM2-135M's shape (30 layers, 9 query heads over 3 KV
// heads of 64 dims, fp16 K/V in blocks of 16): one decode step's attention for a batch of
// sequences, each at the same context length, with its blocks scattered through the pool as a
// long-running server leaves them. The pool spans every layer (B x ctx x 23 KB), more than the
// caches hold at batch 16, so `kv_GB/s` compares with the machine's memory bandwidth.
//
//   troupe_attention_bench [--benchmark_filter=...]   TROUPE_BENCH_THREADS=n (default 2)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/paged_attention.hpp"
#include "model/quant.hpp"
#include "model/thread_pool.hpp"

namespace troupe::bench {

using namespace troupe::model;

namespace {

constexpr int k_layers = 30, k_heads = 9, k_kv_heads = 3, k_head_dim = 64, k_block = 16;

thread_pool& pool() {
  static thread_pool p([] {
    const char* env = std::getenv("TROUPE_BENCH_THREADS");
    return env ? std::atoi(env) : 2;
  }());
  return p;
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Args: batch, context length, order (0 = llama.cpp's decode order, 1 = fast), K/V (0 = fp16,
// 1 = q8: int8 rows with a scale each, attended by the fast kernel whatever the order).
void BM_decode_step_attention(benchmark::State& state) {
  const auto batch = static_cast<int>(state.range(0));
  const auto n_ctx = static_cast<int32_t>(state.range(1));
  const auto order = state.range(2) != 0 ? attention_order::fast : attention_order::single;
  const bool q8 = state.range(3) != 0;
  // K by column (the backend's layout for the fast kernel), or by row (the fast kernel's other
  // fp16 path, for comparison).
  const bool by_column = state.range(4) != 0 && kv_k_by_column(q8 ? kv_dtype::q8 : kv_dtype::f16, k_head_dim,
                                                                order == attention_order::fast);
  if (q8 && !kv_q8_supported(k_head_dim)) {
    state.SkipWithError("no q8 K/V kernel on this CPU");
    return;
  }
  const int blocks_per_seq = (n_ctx + k_block - 1) / k_block;
  const int n_blocks = batch * blocks_per_seq;
  const size_t layer_elems = static_cast<size_t>(n_blocks) * k_kv_heads * k_block * k_head_dim;

  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t elem = q8 ? 1 : 2, layer_rows = layer_elems / k_head_dim;
  std::vector<uint8_t> k(layer_elems * k_layers * elem), v(k.size());
  std::vector<float> k_scale(layer_rows * k_layers), v_scale(k_scale.size());
  {
    // Every position's K and V through kv_store, as the backend writes them.
    kv_layer_view all;
    all.k = k.data();
    all.v = v.data();
    all.k_scale = k_scale.data();
    all.v_scale = v_scale.data();
    all.dtype = q8 ? kv_dtype::q8 : kv_dtype::f16;
    all.n_kv_heads = k_kv_heads;
    all.head_dim = k_head_dim;
    all.block_size = k_block;
    all.k_by_column = by_column;
    std::vector<int32_t> identity(static_cast<size_t>(n_blocks * k_layers));
    std::iota(identity.begin(), identity.end(), 0);
    std::vector<float> row(k_kv_heads * k_head_dim), row2(row.size());
    for (int32_t pos = 0; pos < n_blocks * k_layers * k_block; ++pos) {
      for (auto& x : row) x = dist(rng);
      for (auto& x : row2) x = dist(rng);
      kv_store(all, identity.data(), pos, row.data(), row2.data());
    }
  }
  // Each sequence's blocks: a random subset of the pool, in random order.
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<float> q(static_cast<size_t>(batch) * k_heads * k_head_dim), out(q.size());
  for (auto& e : q) e = dist(rng);

  const float scale = 0.125f;
  const int group = k_heads / k_kv_heads;
  for (auto _ : state) {
    for (int il = 0; il < k_layers; ++il) {
      kv_layer_view kv;
      kv.k = k.data() + layer_elems * elem * static_cast<size_t>(il);
      kv.v = v.data() + layer_elems * elem * static_cast<size_t>(il);
      kv.k_scale = k_scale.data() + layer_rows * static_cast<size_t>(il);
      kv.v_scale = v_scale.data() + layer_rows * static_cast<size_t>(il);
      kv.dtype = q8 ? kv_dtype::q8 : kv_dtype::f16;
      kv.n_kv_heads = k_kv_heads;
      kv.head_dim = k_head_dim;
      kv.block_size = k_block;
      kv.k_by_column = by_column;
      pool().run_chunks(static_cast<int64_t>(batch) * k_kv_heads, [&](int64_t task) {
        thread_local std::vector<float> scratch;
        if (scratch.size() < static_cast<size_t>(n_ctx) * group) scratch.resize(static_cast<size_t>(n_ctx) * group);
        const auto s = static_cast<int>(task / k_kv_heads);
        const auto g = static_cast<int>(task % k_kv_heads);
        const size_t tok = static_cast<size_t>(s) * k_heads * k_head_dim;
        paged_attention_group(q.data() + tok, kv, ids.data() + static_cast<size_t>(s) * blocks_per_seq, n_ctx, g, group,
                              scale, out.data() + tok, scratch.data(), order);
      });
    }
    benchmark::ClobberMemory();
  }
  const double kv_bytes = 2.0 * batch * n_ctx * k_kv_heads * (k_head_dim * static_cast<double>(elem) + (q8 ? 4 : 0)) * k_layers;
  state.counters["kv_GB/s"] = benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  // Where the fast order's kernel runs, fp16 K is laid out by column for it.
  const bool fast_kernel = order == attention_order::fast && kv_k_by_column(kv_dtype::f16, k_head_dim, true);
  state.SetLabel(std::string(q8 ? "q8 K/V" : fast_kernel ? "fast order" : "llama.cpp decode order") +
                 (by_column ? ", K by column" : ", K by row"));
}
BENCHMARK(BM_decode_step_attention)
    ->ArgNames({"batch", "ctx", "fast", "q8", "kcol"})
    ->Args({1, 256, 0, 0, 0})
    ->Args({1, 256, 1, 0, 0})
    ->Args({1, 256, 1, 0, 1})
    ->Args({1, 256, 1, 1, 1})
    ->Args({4, 256, 1, 0, 1})
    ->Args({16, 256, 0, 0, 0})
    ->Args({16, 256, 1, 0, 0})
    ->Args({16, 256, 1, 0, 1})
    ->Args({16, 256, 1, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", min_of);

}  // namespace

}  // namespace troupe::bench

BENCHMARK_MAIN();

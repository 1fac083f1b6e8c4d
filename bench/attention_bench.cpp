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
#include <vector>

#include "model/paged_attention.hpp"
#include "model/quant.hpp"
#include "model/thread_pool.hpp"

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

// Args: batch, context length, order (0 = llama.cpp's decode order, 1 = fast).
void BM_decode_step_attention(benchmark::State& state) {
  const auto batch = static_cast<int>(state.range(0));
  const auto n_ctx = static_cast<int32_t>(state.range(1));
  const auto order = state.range(2) != 0 ? attention_order::fast : attention_order::single;
  const int blocks_per_seq = (n_ctx + k_block - 1) / k_block;
  const int n_blocks = batch * blocks_per_seq;
  const size_t layer_elems = static_cast<size_t>(n_blocks) * k_kv_heads * k_block * k_head_dim;

  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> k(layer_elems * k_layers), v(layer_elems * k_layers);
  for (auto* kv : {&k, &v})
    for (auto& e : *kv) e = fp32_to_fp16(dist(rng));
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
      kv.k = k.data() + layer_elems * static_cast<size_t>(il);
      kv.v = v.data() + layer_elems * static_cast<size_t>(il);
      kv.n_kv_heads = k_kv_heads;
      kv.head_dim = k_head_dim;
      kv.block_size = k_block;
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
  const double kv_bytes = 2.0 * batch * n_ctx * k_kv_heads * k_head_dim * 2 * k_layers;
  state.counters["kv_GB/s"] = benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(order == attention_order::fast ? "fast order" : "llama.cpp decode order");
}
BENCHMARK(BM_decode_step_attention)
    ->ArgNames({"batch", "ctx", "fast"})
    ->ArgsProduct({{1, 16}, {256}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", min_of);

}  // namespace

BENCHMARK_MAIN();

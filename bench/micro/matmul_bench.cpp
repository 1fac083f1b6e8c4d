// Throughput of the CPU matmul kernels on SmolLM2-135M's shapes (hidden 576, kv 192, ffn 1536,
// vocab 49152; Q4_1 matrices and a Q8_0 output head), plus a whole decode step's worth of
// matmuls and the thread pool's dispatch latency.
//
//   troupe_matmul_bench [--benchmark_filter=...]
//   TROUPE_BENCH_THREADS=n (default 2), TROUPE_BENCH_HOT=1 (weights cached, see cold_bytes)
//
// Weights are synthetic. Each benchmark cycles through enough copies of its matrix (>= 64 MiB)
// that every call reads its weights from DRAM, as a real decode step does, so `weight_GB/s` is
// comparable to the machine's memory bandwidth. GFLOP/s counts 2 * n_in * n_out * n_tok.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/detail/matmul_kernels.hpp"
#include "model/matmul.hpp"
#include "model/quant.hpp"

namespace troupe::bench {

using namespace troupe::model;

namespace {

int bench_threads() {
  const char* env = std::getenv("TROUPE_BENCH_THREADS");
  return env ? std::atoi(env) : 2;
}

thread_pool& pool() {
  static thread_pool p(bench_threads());
  return p;
}

// TROUPE_BENCH_HOT=1 keeps a single copy of each matrix, so weights come from cache and the
// figures show the kernels' compute ceiling rather than DRAM bandwidth.
size_t cold_bytes() {
  const char* env = std::getenv("TROUPE_BENCH_HOT");
  return env && std::atoi(env) != 0 ? 0 : size_t{64} << 20;
}

struct weight_set {
  ggml_type type;
  int64_t n_in, n_out;
  size_t stride;
  std::vector<std::vector<uint8_t>> copies;
  std::vector<packed_weights> packed;  // the copies in the fast order's layout, when asked for
  weight_view view(size_t i) const {
    weight_view v{type, copies[i % copies.size()].data(), n_in, n_out, stride};
    if (!packed.empty()) v.packed = packed[i % packed.size()].bytes.get();
    return v;
  }
  void pack() {
    for (const auto& c : copies) packed.push_back(pack_weights(weight_view{type, c.data(), n_in, n_out, stride}));
    if (!packed.front()) packed.clear();  // no fast kernels on this CPU
  }
  size_t bytes() const { return stride * static_cast<size_t>(n_out); }
};

std::unique_ptr<weight_set> make_weights(ggml_type type, int64_t n_in, int64_t n_out, size_t min_total) {
  auto w = std::make_unique<weight_set>();
  w->type = type;
  w->n_in = n_in;
  w->n_out = n_out;
  w->stride = row_bytes(type, n_in);
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(n_in));
  std::vector<uint8_t> first(w->bytes());
  for (int64_t o = 0; o < n_out; ++o) {
    for (auto& v : row) v = dist(rng);
    quantize_row(type, row.data(), first.data() + static_cast<size_t>(o) * w->stride, n_in);
  }
  const size_t n_copies = std::max<size_t>(1, (min_total + first.size() - 1) / first.size());
  w->copies.assign(n_copies, first);
  return w;
}

std::vector<float> random_acts(int64_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

// With --benchmark_repetitions=N, the best repetition: on a shared machine the others mostly
// measure who else was running. Read times from the _min row and rates from the _max row.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void set_counters(benchmark::State& state, size_t weight_bytes, double flops) {
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// fast: the weights packed for the fast order (model.matmul = "fast"; AVX-512 VNNI or AVX2).
void run_matmul(benchmark::State& state, ggml_type type, int64_t n_in, int64_t n_out,
                troupe::model::detail::isa_kind isa, bool fast = false) {
  const int64_t n_tok = state.range(0);
  const auto w = make_weights(type, n_in, n_out, cold_bytes());
  if (fast) w->pack();
  const auto x = random_acts(n_tok * n_in);
  std::vector<float> y(static_cast<size_t>(n_tok * n_out));
  size_t i = 0;
  for (auto _ : state) {
    troupe::model::detail::matmul_with_isa(isa, w->view(i++), x.data(), n_tok, y.data(), pool());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, w->bytes(), 2.0 * static_cast<double>(n_in * n_out * n_tok));
  state.SetLabel(std::string(troupe::model::detail::isa_name(isa)) + (fast && !w->packed.empty() ? ", fast order" : ""));
}

// One decode step of SmolLM2-135M (n_tok tokens: 1, the 2-8 of a speculative verify step, 16, 64; 256 as in a prefill chunk):
// 30 layers x (q, k, v, o, gate, up, down) in Q4_1, then the Q8_0 output head; 30 distinct
// layers (~96 MB) so nothing stays cached between steps.
// multi=1 groups Q/K/V and gate/up into matmul_multi calls (5 dispatches per layer, not 7);
// fast=1 uses the fast matmul order (weights packed 16 rows at a time; model.matmul = "fast").
void BM_decode_step_matmuls(benchmark::State& state) {
  const int64_t n_tok = state.range(0);
  struct layer {
    std::unique_ptr<weight_set> q, k, v, o, gate, up, down;
  };
  std::vector<layer> layers(30);
  for (auto& l : layers) {
    l.q = make_weights(ggml_type::q4_1, 576, 576, 0);
    l.k = make_weights(ggml_type::q4_1, 576, 192, 0);
    l.v = make_weights(ggml_type::q4_1, 576, 192, 0);
    l.o = make_weights(ggml_type::q4_1, 576, 576, 0);
    l.gate = make_weights(ggml_type::q4_1, 576, 1536, 0);
    l.up = make_weights(ggml_type::q4_1, 576, 1536, 0);
    l.down = make_weights(ggml_type::q4_1, 1536, 576, 0);
  }
  const auto head = make_weights(ggml_type::q8_0, 576, 49152, 0);
  const auto x576 = random_acts(n_tok * 576);
  const auto x1536 = random_acts(n_tok * 1536);
  std::vector<float> y(static_cast<size_t>(n_tok * 49152));
  size_t bytes = head->bytes();
  double flops = 2.0 * 576 * 49152;
  for (auto& l : layers) {
    for (auto* w : {l.q.get(), l.k.get(), l.v.get(), l.o.get(), l.gate.get(), l.up.get(), l.down.get()}) {
      bytes += w->bytes();
      flops += 2.0 * static_cast<double>(w->n_in * w->n_out);
    }
  }
  // With `multi`, Q/K/V and gate/up go through matmul_multi (one dispatch each group).
  const bool multi = state.range(1) != 0;
  if (state.range(2) != 0) {
    for (auto& l : layers)
      for (auto* w : {l.q.get(), l.k.get(), l.v.get(), l.o.get(), l.gate.get(), l.up.get(), l.down.get()}) w->pack();
    head->pack();
  }
  std::vector<float> y2(y.size()), y3(y.size());
  float* outs[3] = {y.data(), y2.data(), y3.data()};
  for (auto _ : state) {
    for (auto& l : layers) {
      if (multi) {
        const weight_view qkv[3] = {l.q->view(0), l.k->view(0), l.v->view(0)};
        matmul_multi(qkv, outs, 3, x576.data(), n_tok, pool());
        matmul(l.o->view(0), x576.data(), n_tok, y.data(), pool());
        const weight_view gate_up[2] = {l.gate->view(0), l.up->view(0)};
        matmul_multi(gate_up, outs, 2, x576.data(), n_tok, pool());
      } else {
        for (auto* w : {l.q.get(), l.k.get(), l.v.get(), l.o.get(), l.gate.get(), l.up.get()}) {
          matmul(w->view(0), x576.data(), n_tok, y.data(), pool());
        }
      }
      matmul(l.down->view(0), x1536.data(), n_tok, y.data(), pool());
    }
    matmul(head->view(0), x576.data(), n_tok, y.data(), pool());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, flops * static_cast<double>(n_tok));
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(n_tok), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(matmul_isa()) + (state.range(2) != 0 && !head->packed.empty() ? ", fast order" : ", llama.cpp order"));
}
BENCHMARK(BM_decode_step_matmuls)->ArgNames({"n_tok", "multi", "fast"})->ArgsProduct({{1, 2, 3, 4, 5, 8, 16, 64, 256}, {0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);

// Hand-off cost of one empty pool.run (what each of a step's ~200 matmuls pays on top).
void BM_pool_run(benchmark::State& state) {
  for (auto _ : state) pool().run([](int, int) {});
}
BENCHMARK(BM_pool_run)->UseRealTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);

// Same for a chunk job of 4 empty chunks (how matmul dispatches its rows).
void BM_pool_run_chunks(benchmark::State& state) {
  for (auto _ : state) pool().run_chunks(4, [](int64_t) {});
}
BENCHMARK(BM_pool_run_chunks)->UseRealTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);

void register_shapes() {
  using troupe::model::detail::isa_kind;
  struct shape {
    const char* name;
    ggml_type type;
    int64_t n_in, n_out;
  };
  const shape shapes[] = {
      {"q4_1/576x576", ggml_type::q4_1, 576, 576},     {"q4_1/576x192", ggml_type::q4_1, 576, 192},
      {"q4_1/576x1536", ggml_type::q4_1, 576, 1536},   {"q4_1/1536x576", ggml_type::q4_1, 1536, 576},
      {"q8_0/576x49152", ggml_type::q8_0, 576, 49152},
  };
  std::vector<isa_kind> isas = {troupe::model::detail::best_isa()};
  if (isas[0] == isa_kind::avx512vnni) isas.push_back(isa_kind::avx2);
  // "fast": the fast order's packed kernels on the best ISA; "fast_avx2": its AVX2 kernels on a
  // CPU whose best is AVX-512 VNNI (the same results, for AVX2 CPUs).
  std::vector<std::pair<isa_kind, bool>> paths;
  for (auto isa : isas) paths.emplace_back(isa, false);
  for (auto isa : isas)
    if (isa != isa_kind::scalar) paths.emplace_back(isa, true);
  auto path_name = [&isas](isa_kind isa, bool fast) {
    if (!fast) return std::string(troupe::model::detail::isa_name(isa));
    return isa == isas[0] ? std::string("fast") : std::string("fast_") + troupe::model::detail::isa_name(isa);
  };
  for (auto [isa, fast] : paths) {
    for (const auto& s : shapes) {
      const std::string name = "BM_matmul/" + path_name(isa, fast) + "/" + s.name;
      auto* b = benchmark::RegisterBenchmark(name.c_str(), [s, isa, fast](benchmark::State& st) {
        run_matmul(st, s.type, s.n_in, s.n_out, isa, fast);
      });
      b->ArgName("n_tok")->Arg(1)->Arg(16)->Arg(64)->Arg(512)->UseRealTime()->Unit(benchmark::kMicrosecond);
      b->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);
    }
  }
  for (auto [isa, fast] : paths) {
    for (auto t : {ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k, ggml_type::f16}) {
      if (fast && t == ggml_type::f16) continue;
      const std::string name = "BM_matmul/" + path_name(isa, fast) + "/" + type_name(static_cast<uint32_t>(t)) + "/1536x1536";
      auto* b = benchmark::RegisterBenchmark(name.c_str(), [t, isa, fast](benchmark::State& st) {
        run_matmul(st, t, 1536, 1536, isa, fast);
      });
      b->ArgName("n_tok")->Arg(1)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);
      b->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);
    }
  }
}

}  // namespace

}  // namespace troupe::bench

int main(int argc, char** argv) {
  troupe::bench::register_shapes();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

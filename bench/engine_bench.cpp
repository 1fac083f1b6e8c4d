// `troupe bench engine`: prefill, single-sequence decode and batched decode throughput of the
// CPU backend, with llama.cpp's llama-bench and llama-batched-bench run on the same file with
// the same thread count in the same run, and the ratios between them.
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/bench_command.hpp"
#include "model/batch_generator.hpp"
#include "model/cpu_backend.hpp"
#include "model/loaded_model.hpp"
#include "model/matmul.hpp"
#include "model/matmul_amx.hpp"
#include "model/paged_attention.hpp"
#include "common/result.hpp"
#include "model/step_profile.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::model;

struct bench_options {
  std::string model = default_model_path();
  std::string llama_bin = ".cache/llama.cpp/build/bin";
  int threads = 0;
  int prefill_tokens = 512;
  int decode_tokens = 128;
  int batch_prompt = 128;
  int batch_gen = 128;
  std::vector<int> batches = {1, 4, 16, 64};
  int repeats = 3;
  int batch_repeats = 5;
  int block_size = backend_options{}.block_size;  // KV block size in tokens (the server's default)
  bool skip_llama = false;
  std::string matmul = "both";
  std::string kv = "both";  // f16, q8 or both (q8: one more run, in the fast order when it runs)
  // How the decode tests sample (greedy by default, as llama.cpp's benches do); each request
  // draws with its own seed.
  sampling_params sampling;
};

// The sampling of the decode tests' request number i.
sampling_params request_sampling(const bench_options& o, int i) {
  sampling_params s = o.sampling;
  s.seed = 7919 + static_cast<uint64_t>(i);
  return s;
}

std::string fixed2(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<int32_t> random_prompt(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  // Ids from the lower part of the vocabulary: ordinary text tokens, no control tokens.
  for (auto& x : t) x = static_cast<int32_t>(100 + rng() % static_cast<uint32_t>(std::min(n_vocab - 100, 30000)));
  return t;
}

long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

struct llama_figures {
  double pp = 0, tg = 0;                 // llama-bench pp512 / tg128
  std::vector<std::pair<int, double>> batched;  // B → aggregate decode tokens/s
  std::string note;
};

llama_figures run_llama(const bench_options& o, int threads) {
  llama_figures f;
  const std::string env = "LD_LIBRARY_PATH='" + o.llama_bin + "' ";
  const std::string bench = o.llama_bin + "/llama-bench";
  if (o.skip_llama) {
    f.note = "llama.cpp skipped (--skip-llama)";
    return f;
  }
  if (FILE* x = fopen(bench.c_str(), "r")) {
    fclose(x);
  } else {
    f.note = "llama.cpp not built: run scripts/build-llama-cpp.sh to compare";
    return f;
  }
  std::fprintf(stderr, "running llama-bench (pp%d, tg%d, %d threads) ...\n", o.prefill_tokens, o.decode_tokens, threads);
  auto out = run_capture(env + bench + " -m '" + o.model + "' -t " + std::to_string(threads) + " -p " +
                         std::to_string(o.prefill_tokens) + " -n " + std::to_string(o.decode_tokens) +
                         " -r " + std::to_string(o.repeats) + " -o csv 2>/dev/null");
  // CSV rows end with ...,n_prompt,n_gen,...,avg_ts,stddev_ts; find the header to index columns.
  std::istringstream ss(out);
  std::string line, header;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::string cur;
    bool q = false;
    for (char c : s) {
      if (c == '"') q = !q;
      else if (c == ',' && !q) { v.push_back(cur); cur.clear(); }
      else cur += c;
    }
    v.push_back(cur);
    return v;
  };
  std::vector<std::string> cols;
  while (std::getline(ss, line)) {
    auto v = split(line);
    if (cols.empty()) {
      if (std::find(v.begin(), v.end(), "avg_ts") != v.end()) cols = v;
      continue;
    }
    auto col = [&](const char* name) -> std::string {
      auto it = std::find(cols.begin(), cols.end(), name);
      size_t i = static_cast<size_t>(it - cols.begin());
      return it == cols.end() || i >= v.size() ? "" : v[i];
    };
    if (col("n_prompt") == std::to_string(o.prefill_tokens) && col("n_gen") == "0") f.pp = std::atof(col("avg_ts").c_str());
    if (col("n_gen") == std::to_string(o.decode_tokens) && col("n_prompt") == "0") f.tg = std::atof(col("avg_ts").c_str());
  }

  std::string npl;
  for (int b : o.batches) npl += (npl.empty() ? "" : ",") + std::to_string(b);
  const int ctx = (o.batch_prompt + o.batch_gen) * std::max(1, *std::max_element(o.batches.begin(), o.batches.end())) + 256;
  std::fprintf(stderr, "running llama-batched-bench (%d prompt + %d generated, B = %s) ...\n", o.batch_prompt, o.batch_gen,
               npl.c_str());
  out = run_capture(env + o.llama_bin + "/llama-batched-bench -m '" + o.model + "' -t " + std::to_string(threads) +
                    " -tb " + std::to_string(threads) + " -c " + std::to_string(ctx) + " -b 2048 -ub 512 -npp " +
                    std::to_string(o.batch_prompt) + " -ntg " + std::to_string(o.batch_gen) + " -npl " + npl + " 2>/dev/null");
  // Table rows: |  PP |  TG |  B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
  std::regex row(R"(^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|)");
  std::istringstream bs(out);
  while (std::getline(bs, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) f.batched.emplace_back(std::stoi(m[3]), std::stod(m[8]));
  }
  if (f.pp == 0 || f.tg == 0 || f.batched.empty()) f.note = "could not read some llama.cpp figures";
  return f;
}

// Troupe's figures in one matmul order, on a backend built for it.
struct troupe_figures {
  matmul_order order = matmul_order::llama_cpp;
  bool kv_q8 = false;
  std::string name() const { return std::string(matmul_order_name(order)) + " order" + (kv_q8 ? ", q8 K/V" : ""); }
  std::vector<double> pp, tg;
  std::vector<std::pair<int, double>> agg;  // batch size, aggregate decode tokens/s
  std::vector<std::pair<int, std::vector<double>>> to_b1;  // batch size, each round's ratio to batch 1
  kv_usage peak;
  // The last round's decode steps at batch 1 and at 16 (else the largest batch), phase by phase,
  // and their mean wall time (forward plus sampling and bookkeeping).
  struct profiled_batch {
    int batch = 0;
    step_profile profile;
    double step_seconds = 0;
  };
  std::vector<profiled_batch> profiles;
  size_t kv_bytes_per_token = 0;
  int32_t block_size = 0;
  double at(int b) const {
    for (auto [bb, tps] : agg)
      if (bb == b) return tps;
    return 0.0;
  }
};

// The first request's error among a run's outputs, if any (a figure measured over failed
// requests means nothing).
status first_error(const std::vector<generation_output>& outs, const std::string& what) {
  for (const auto& out : outs)
    if (!out.error.empty()) return make_error(what + ": " + out.error);
  return {};
}

// One batched-decode run: aggregate decode tokens/s; `peak` keeps the fullest KV use seen.
result<double> batched_decode(backend& be, const bench_options& o, int b, kv_usage& peak,
                              double* step_seconds = nullptr) {
  batch_generator gen(be, 2048);
  std::vector<generation_request> reqs;
  for (int i = 0; i < b; ++i) {
    generation_request req;
    req.prompt = random_prompt(o.batch_prompt, be.params().n_vocab, 1000 + static_cast<uint32_t>(i));
    req.max_tokens = o.batch_gen;
    req.sampling = request_sampling(o, i);
    reqs.push_back(req);
  }
  generation_stats st;
  if (auto e = first_error(gen.run(reqs, &st), "batch " + std::to_string(b)); !e) return make_error(e.error());
  if (st.peak_kv.blocks_used > peak.blocks_used) peak = st.peak_kv;
  if (step_seconds) *step_seconds = st.decode_steps > 0 ? st.decode_seconds / static_cast<double>(st.decode_steps) : 0.0;
  // The first token of each sequence comes from prefill; the decode phase makes the rest.
  return static_cast<double>(st.generated_tokens - b) / st.decode_seconds;
}

// The ceiling of single-sequence decode: a decode step reads every weight once, so it cannot run
// faster than a plain streaming read of that many bytes on the same threads. The best of 5 passes
// over a buffer of `bytes` (zeros: no denormal slow path), each thread summing its slice with
// vector adds, four independent chains deep.
struct read_ceiling {
  double gb_per_s = 0;
  size_t bytes = 0;
  int threads = 0;
  double tokens_per_s() const { return bytes ? gb_per_s * 1e9 / static_cast<double>(bytes) : 0.0; }
};

read_ceiling measure_read_ceiling(thread_pool& pool, size_t bytes) {
  using v4d = double __attribute__((vector_size(32)));
  const size_t n = (bytes + 127) / 128 * 4;  // v4d elements, a multiple of 4
  auto* buf = static_cast<v4d*>(std::aligned_alloc(64, n * sizeof(v4d)));
  if (!buf) return {};
  std::unique_ptr<v4d, void (*)(void*)> hold(buf, std::free);
  // Each thread touches its own slice first, so its pages are where that thread reads them.
  pool.run([&](int ith, int nth) {
    const size_t a = n / 4 * ith / nth * 4, b = n / 4 * (ith + 1) / nth * 4;
    std::memset(static_cast<void*>(buf + a), 0, (b - a) * sizeof(v4d));
  });
  std::vector<double> sink(static_cast<size_t>(pool.size()));
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int nth) {
      const size_t a = n / 4 * ith / nth * 4, b = n / 4 * (ith + 1) / nth * 4;
      v4d s0 = {}, s1 = {}, s2 = {}, s3 = {};
      for (size_t i = a; i < b; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      const v4d s = s0 + s1 + s2 + s3;
      sink[static_cast<size_t>(ith)] = s[0] + s[1] + s[2] + s[3];
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(v4d)) / secs / 1e9);
  }
  volatile double keep = sink[0];  // the sums are used: the reads stay
  (void)keep;
  return read_ceiling{best, bytes, pool.size()};
}

result<troupe_figures> measure_troupe(backend& be, const bench_options& o, matmul_order order, bool kv_q8) {
  const auto& hp = be.params();
  troupe_figures f;
  f.order = order;
  f.kv_q8 = kv_q8;
  f.kv_bytes_per_token = be.kv_bytes_per_token();
  f.block_size = be.block_size();
  const std::string label = f.name();
  const char* name = label.c_str();
  // Prefill: one prompt of prefill_tokens, in one step.
  for (int r = 0; r < o.repeats; ++r) {
    batch_generator gen(be, o.prefill_tokens);
    generation_request req;
    req.prompt = random_prompt(o.prefill_tokens, hp.n_vocab, 1 + static_cast<uint32_t>(r));
    req.max_tokens = 1;
    generation_stats st;
    if (auto e = first_error(gen.run({req}, &st), "prefill"); !e) return make_error(e.error());
    f.pp.push_back(st.prompt_tokens / st.prefill_seconds);
    std::fprintf(stderr, "  %s: prefill run %d: %.1f tokens/s\n", name, r + 1, f.pp.back());
  }
  // Single-sequence decode: a short prompt, then decode_tokens generated.
  for (int r = 0; r < o.repeats; ++r) {
    batch_generator gen(be, 512);
    generation_request req;
    req.prompt = random_prompt(16, hp.n_vocab, 100 + static_cast<uint32_t>(r));
    req.max_tokens = o.decode_tokens + 1;
    req.sampling = request_sampling(o, r);
    generation_stats st;
    if (auto e = first_error(gen.run({req}, &st), "decode"); !e) return make_error(e.error());
    f.tg.push_back(static_cast<double>(st.decode_steps) / st.decode_seconds);
    std::fprintf(stderr, "  %s: decode run %d: %.1f tokens/s\n", name, r + 1, f.tg.back());
  }
  // Batched decode: B sequences of batch_prompt + batch_gen tokens, decoding together. Each of
  // batch_repeats rounds runs every batch size once, back to back, so that a round's ratios to
  // batch 1 divide figures measured seconds apart (this machine's speed drifts over minutes);
  // figures and ratios are the medians over the rounds.
  std::vector<std::vector<double>> runs(o.batches.size()), ratios(o.batches.size());
  const bool has16 = std::find(o.batches.begin(), o.batches.end(), 16) != o.batches.end();
  const int big = has16 ? 16 : *std::max_element(o.batches.begin(), o.batches.end());
  auto* cpu = dynamic_cast<cpu_backend*>(&be);
  for (int b : {1, big})
    if (cpu && std::find(o.batches.begin(), o.batches.end(), b) != o.batches.end() &&
        (f.profiles.empty() || f.profiles.back().batch != b))
      f.profiles.push_back({b, {}, 0.0});
  for (int r = 0; r < std::max(1, o.batch_repeats); ++r) {
    double b1 = 0;
    for (size_t i = 0; i < o.batches.size(); ++i) {
      const int b = o.batches[i];
      troupe_figures::profiled_batch* prof = nullptr;
      if (r + 1 == std::max(1, o.batch_repeats))
        for (auto& p : f.profiles)
          if (p.batch == b) prof = &p;
      if (prof) cpu->set_profile(&prof->profile);
      auto tps = batched_decode(be, o, b, f.peak, prof ? &prof->step_seconds : nullptr);
      if (prof) cpu->set_profile(nullptr);
      if (!tps) return make_error(tps.error());
      runs[i].push_back(tps.value());
      std::fprintf(stderr, "  %s: round %d, batch %d: %.1f tokens/s aggregate decode\n", name, r + 1, b, runs[i].back());
      if (b == 1) b1 = runs[i].back();
    }
    for (size_t i = 0; i < o.batches.size(); ++i)
      if (b1 > 0) ratios[i].push_back(runs[i].back() / b1);
  }
  for (size_t i = 0; i < o.batches.size(); ++i) {
    f.agg.emplace_back(o.batches[i], median(runs[i]));
    if (!ratios[i].empty()) f.to_b1.emplace_back(o.batches[i], ratios[i]);
  }
  return f;
}

// A decode step's time by phase (cpu_backend's profile) against its mean wall time.
void print_profile(const std::string& name, int batch, const step_profile& p, double step_seconds) {
  if (p.steps == 0 || step_seconds <= 0) return;
  const double step_ms = step_seconds * 1e3, per = 1e3 / static_cast<double>(p.steps);
  auto line = [step_ms](const char* what, double ms) {
    std::printf("  %-48s %7.3f ms  %5.1f%%\n", what, ms, 100.0 * ms / step_ms);
  };
  std::printf("\n%s, batch %d: a decode step of %.2f ms (mean of the last round's %lld steps), by phase:\n", name.c_str(),
              batch, step_ms, static_cast<long long>(p.steps));
  double matmuls = 0;
  for (int i = 0; i < step_profile::n_phases; ++i) {
    const double ms = p.seconds[static_cast<size_t>(i)] * per;
    if (i == step_profile::qkv || i == step_profile::wo || i == step_profile::gate_up || i == step_profile::down ||
        i == step_profile::head)
      matmuls += ms;
    line(step_profile::names[static_cast<size_t>(i)], ms);
  }
  line("sampling, batch setup (outside forward)", step_ms - p.total() * per);
  const double attention = p.seconds[step_profile::attention] * per;
  std::printf("  matmuls (with the work on their rows) together %.3f ms (%.1f%%), attention %.3f ms (%.1f%%)\n", matmuls,
              100.0 * matmuls / step_ms,
              attention, 100.0 * attention / step_ms);
}

// The engine issue's floors, each configuration against them: prefill and single-sequence
// decode >= 0.8x llama.cpp, aggregate decode at batch 16 >= 4x the same configuration's batch 1
// (the median of the rounds' ratios) and >= 3x llama-batched-bench's figure.
void print_floors(const std::vector<troupe_figures>& runs, const llama_figures& llama) {
  auto verdict = [](double value, double floor) { return value >= floor ? "met" : "NOT met"; };
  auto vs_llama = [&](std::string& line, const char* what, double ours, double theirs, double floor) {
    line += "; " + std::string(what) + " ";
    if (theirs <= 0) {
      line += "(no llama.cpp figure)";
      return;
    }
    line += fixed2(ours / theirs) + "x llama.cpp, " + verdict(ours / theirs, floor);
  };
  std::printf("\nfloors (prefill and decode >= 0.8x llama.cpp; batch 16 >= 4x its own batch 1 and >= 3x llama.cpp's "
              "batched figure):\n");
  double llama_b16 = 0;
  for (auto [b, tps] : llama.batched)
    if (b == 16) llama_b16 = tps;
  for (const auto& r : runs) {
    std::string line;
    vs_llama(line, "prefill", median(r.pp), llama.pp, 0.8);
    vs_llama(line, "decode", median(r.tg), llama.tg, 0.8);
    const std::vector<double>* b16 = nullptr;
    for (const auto& [b, each] : r.to_b1)
      if (b == 16) b16 = &each;
    if (b16 && !b16->empty()) {
      line += "; batch 16 " + fixed2(median(*b16)) + "x its batch 1, " + verdict(median(*b16), 4.0);
      vs_llama(line, "batch 16", r.at(16), llama_b16, 3.0);
    } else {
      line += "; batch 16 not measured (--batches needs 1 and 16)";
    }
    std::printf("  %s: %s\n", r.name().c_str(), line.substr(2).c_str());
  }
}

int run_bench_engine(const bench_options& o) {
  auto lm = loaded_model::load(o.model);
  if (!lm) {
    std::fprintf(stderr, "troupe bench engine: %s\n", lm.error().c_str());
    return 1;
  }
  const auto& hp = lm.value()->weights->params();
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.batches.empty()) {
    std::fprintf(stderr, "troupe bench engine: --batches names no batch size\n");
    return 1;
  }
  const int max_b = *std::max_element(o.batches.begin(), o.batches.end());
  // Every test's sequence must fit the model's context: each prefill run also samples a token,
  // and the decode test's prompt is 16 tokens and it generates one more token than it times.
  for (auto [what, n] : {std::pair<const char*, int64_t>{"--prefill-tokens + 1", int64_t{o.prefill_tokens} + 1},
                         {"16 + --decode-tokens + 1", 17 + int64_t{o.decode_tokens}},
                         {"--batch-prompt + --batch-gen", int64_t{o.batch_prompt} + o.batch_gen}})
    if (n > hp.n_ctx_train) {
      std::fprintf(stderr, "troupe bench engine: %s is %lld tokens, more than the model's context of %d\n", what,
                   static_cast<long long>(n), hp.n_ctx_train);
      return 1;
    }
  std::vector<matmul_order> orders;
  if (o.matmul == "both") {
    orders = {matmul_order::llama_cpp, matmul_order::fast};
  } else if (auto order = parse_matmul_order(o.matmul)) {
    orders = {*order};
  } else {
    std::fprintf(stderr, "troupe bench engine: --matmul must be both, fast or llama.cpp, not '%s'\n", o.matmul.c_str());
    return 1;
  }
  if (auto s = o.sampling.validate(); !s) {
    std::fprintf(stderr, "troupe bench engine: %s\n", s.error().c_str());
    return 1;
  }
  if (o.kv != "f16" && o.kv != "q8" && o.kv != "both") {
    std::fprintf(stderr, "troupe bench engine: --kv must be f16, q8 or both, not '%s'\n", o.kv.c_str());
    return 1;
  }
  // (order, q8 K/V) runs: each order with fp16 K/V, and q8 K/V once, in the fast order if asked.
  std::vector<std::pair<matmul_order, bool>> configs;
  for (auto order : orders)
    if (o.kv != "q8") configs.emplace_back(order, false);
  if (o.kv != "f16") {  // q8 K/V needs AVX-512 only: without the fast kernels, in llama.cpp's order
    const bool fast = std::find(orders.begin(), orders.end(), matmul_order::fast) != orders.end() &&
                      std::string(matmul_isa()) == "avx512vnni";
    configs.emplace_back(fast ? matmul_order::fast : matmul_order::llama_cpp, true);
  }
  std::vector<troupe_figures> runs;
  read_ceiling ceiling;
  for (auto [order, kv_q8] : configs) {
    backend_options bo;
    bo.n_threads = threads;
    bo.matmul = order;
    bo.kv_q8 = kv_q8;
    bo.block_size = o.block_size;
    bo.kv_bytes = static_cast<int64_t>(max_b) * (o.batch_prompt + o.batch_gen + 32) * hp.n_kv_dim() * hp.n_layer * 2 * 2 +
                  (64ll << 20);
    auto be = make_backend("cpu", lm.value()->weights, bo);
    if (!be && kv_q8 && !kv_q8_supported(hp.head_dim)) {
      std::fprintf(stderr, "note: %s; q8 K/V skipped\n", be.error().c_str());
      continue;
    }
    if (!be) {
      std::fprintf(stderr, "troupe bench engine: %s\n", be.error().c_str());
      return 1;
    }
    const auto* cpu = dynamic_cast<const cpu_backend*>(be.value().get());
    if (cpu && cpu->order() != order) {
      std::fprintf(stderr, "note: no %s matmul kernels on this CPU (%s); skipped\n", matmul_order_name(order), matmul_isa());
      continue;
    }
    if (auto* pool_owner = dynamic_cast<cpu_backend*>(be.value().get()); pool_owner && ceiling.bytes == 0)
      ceiling = measure_read_ceiling(pool_owner->pool(), lm.value()->weights->weight_bytes());
    std::fprintf(stderr, "model %s: %d layers, %d embd, %d vocab; %d threads; matmul path %s, %s order%s\n",
                 lm.value()->id.c_str(), hp.n_layer, hp.n_embd, hp.n_vocab, threads, matmul_isa(), matmul_order_name(order),
                 kv_q8 ? ", q8 K/V" : "");
    auto figures = measure_troupe(*be.value(), o, order, kv_q8);
    if (!figures) {
      std::fprintf(stderr, "troupe bench engine: %s\n", figures.error().c_str());
      return 1;
    }
    runs.push_back(std::move(figures.value()));
  }
  const long rss = peak_rss_kib();
  auto llama = run_llama(o, threads);

  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf("\n## troupe bench engine — %s, %d threads, matmul path %s\n\n", lm.value()->id.c_str(), threads, matmul_isa());
  std::printf("%s\n\n", amx_path_line().c_str());
  if (o.sampling.temperature > 0.0f)
    std::printf("Decode tests sample at temperature %.2f, top_k %d, top_p %.2f (a seed per request); llama.cpp's "
                "benches do not sample.\n\n",
                static_cast<double>(o.sampling.temperature), o.sampling.top_k, static_cast<double>(o.sampling.top_p));
  std::string head = "| test |", rule = "|---|";
  for (const auto& r : runs) {
    head += " troupe (" + r.name() + ") |";
    rule += "---|";
  }
  head += " llama.cpp |";
  rule += "---|";
  for (const auto& r : runs) {
    head += " ratio (" + r.name() + ") |";
    rule += "---|";
  }
  std::printf("%s\n%s\n", head.c_str(), rule.c_str());
  auto row = [&](const std::string& name, auto troupe_value, double reference) {
    std::printf("| %s |", name.c_str());
    for (const auto& r : runs) std::printf(" %.1f |", troupe_value(r));
    std::printf(" %.1f |", reference);
    for (const auto& r : runs) std::printf(" %.2f |", ratio(troupe_value(r), reference));
    std::printf("\n");
  };
  row("prefill pp" + std::to_string(o.prefill_tokens), [](const troupe_figures& r) { return median(r.pp); }, llama.pp);
  row("decode tg" + std::to_string(o.decode_tokens) + " (1 sequence)", [](const troupe_figures& r) { return median(r.tg); },
      llama.tg);
  for (int b : o.batches) {
    double l = 0;
    for (auto [lb, lt] : llama.batched)
      if (lb == b) l = lt;
    row("aggregate decode B=" + std::to_string(b) + " (" + std::to_string(o.batch_prompt) + "+" +
            std::to_string(o.batch_gen) + ")",
        [b](const troupe_figures& r) { return r.at(b); }, l);
  }
  std::printf("\n");
  for (const auto& r : runs)
    for (const auto& [b, each] : r.to_b1) {
      if (b == 1) continue;
      std::string rounds;
      for (double x : each) rounds += (rounds.empty() ? "" : ", ") + fixed2(x);
      std::printf("%s: batch %d = %.2fx its batch 1 (median of %zu rounds' ratios: %s)\n", r.name().c_str(), b,
                  median(each), each.size(), rounds.c_str());
    }
  if (ceiling.bytes) {
    std::printf("\nstreaming read of %.1f MB (the weights' bytes, read once per decode step) on %d threads: %.1f GB/s, "
                "so one sequence decodes at most %.0f tokens/s\n",
                static_cast<double>(ceiling.bytes) / 1e6, ceiling.threads, ceiling.gb_per_s, ceiling.tokens_per_s());
    for (const auto& r : runs)
      std::printf("%s: decode tg%d %.1f tokens/s = %.0f%% of that ceiling\n", r.name().c_str(), o.decode_tokens,
                  median(r.tg), 100.0 * median(r.tg) / ceiling.tokens_per_s());
  }
  print_floors(runs, llama);
  for (const auto& r : runs)
    for (const auto& pb : r.profiles) print_profile(r.name(), pb.batch, pb.profile, pb.step_seconds);
  std::printf("\npeak RSS: %.1f MiB\n", static_cast<double>(rss) / 1024.0);
  for (const auto& r : runs)
    std::printf("%s: KV bytes per token %zu (%s K and V, %d layers x %d dims); peak KV blocks used: %d of %d (%d tokens/block, %lld slots wasted)\n",
                r.name().c_str(), r.kv_bytes_per_token, r.kv_q8 ? "q8" : "fp16", hp.n_layer, hp.n_kv_dim(), r.peak.blocks_used,
                r.peak.blocks_total, r.block_size, static_cast<long long>(r.peak.slots_wasted));
  if (!llama.note.empty()) std::printf("note: %s\n", llama.note.c_str());
  return 0;
}

troupe::app::register_bench reg("engine", "Engine throughput (prefill, decode, batched decode) against llama.cpp",
                                 [](CLI::App& sub) {
                                   auto o = std::make_shared<bench_options>();
                                   sub.add_option("--model,-m", o->model, "GGUF model file")->capture_default_str();
                                   sub.add_option("--threads", o->threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024));
                                   sub.add_option("--matmul", o->matmul, "Quantized matmul order: both (each in the same run), llama.cpp (bit-exact) or fast")->capture_default_str();
                                   sub.add_option("--llama-bin", o->llama_bin, "Folder with llama-bench and llama-batched-bench")
                                       ->capture_default_str();
                                   sub.add_option("--batches", o->batches, "Batch sizes for aggregate decode")->delimiter(',')->check(CLI::Range(1, 1 << 20))->capture_default_str();
                                   sub.add_option("--repeats", o->repeats, "Repetitions of the single-sequence tests")->check(CLI::Range(1, 1 << 20))->capture_default_str();
                                   sub.add_option("--batch-repeats", o->batch_repeats, "Rounds of the batched tests, each batch size once per round (medians)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
                                   sub.add_option("--block-size", o->block_size, "KV block size in tokens")->check(CLI::Range(1, 1024))->capture_default_str();
                                   sub.add_option("--prefill-tokens", o->prefill_tokens, "Prompt length for the prefill test")->check(CLI::Range(1, 1 << 20))->capture_default_str();
                                   sub.add_option("--decode-tokens", o->decode_tokens, "Tokens for the decode test")->check(CLI::Range(1, 1 << 20))->capture_default_str();
                                   sub.add_option("--batch-prompt", o->batch_prompt, "Prompt tokens per sequence in batched decode")->check(CLI::Range(1, 1 << 20))->capture_default_str();
                                   sub.add_option("--batch-gen", o->batch_gen, "Generated tokens per sequence in batched decode (the first comes from prefill)")->check(CLI::Range(2, 1 << 20))->capture_default_str();
                                   sub.add_option("--kv", o->kv, "K/V memory: f16, q8 or both (q8 once, in the fast order when it runs)")->capture_default_str();
                                   sub.add_flag("--skip-llama", o->skip_llama, "Do not run llama.cpp");
                                   sub.add_option("--temperature", o->sampling.temperature, "Decode tests sample at this temperature (0 = greedy)")->capture_default_str();
                                   sub.add_option("--top-k", o->sampling.top_k, "Decode tests keep the top k candidates (0 = all)")->capture_default_str();
                                   sub.add_option("--top-p", o->sampling.top_p, "Decode tests keep the top p of the probability mass (1 = all)")->capture_default_str();
                                   return [o]() { return run_bench_engine(*o); };
                                 });

}  // namespace

}  // namespace troupe::bench

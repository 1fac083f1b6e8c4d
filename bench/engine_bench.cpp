// `troupe bench engine`: prefill, single-sequence decode (also at a long context) and batched
// decode throughput of the CPU backend, with llama.cpp's llama-bench and llama-batched-bench run
// on the same file with the same thread count in the same run, and the ratios between them;
// --json writes every figure the run prints into one document (engine_json_bench.cpp; bench/plot.py
// draws it).
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "app/bench_command.hpp"
#include "bench/engine_bench.hpp"
#include "bench/engine_json_bench.hpp"
#include "bench/llama_runner.hpp"
#include "bench/quality_bench.hpp"
#include "bench/read_ceiling.hpp"
#include "bench/step_breakdown_bench.hpp"
#include "model/huge_pages.hpp"
#include "model/batch_generator.hpp"
#include "model/cpu_backend.hpp"
#include "model/loaded_model.hpp"
#include "model/matmul.hpp"
#include "model/matmul_amx.hpp"
#include "model/paged_attention.hpp"
#include "common/result.hpp"

namespace troupe::bench::engine {

using namespace troupe::model;

namespace {

// The sampling of the decode tests' request number i.
sampling_params request_sampling(const bench_options& o, int i) {
  sampling_params s = o.sampling;
  s.seed = 7919 + static_cast<uint64_t>(i);
  return s;
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

result<troupe_figures> measure_troupe(backend& be, const bench_options& o, matmul_order order, bool kv_q8,
                                      size_t weight_bytes) {
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
  // Single-sequence decode: a short prompt, then decode_tokens generated; each run between two
  // streaming reads of the weights' bytes on the backend's threads.
  auto* cpu = dynamic_cast<cpu_backend*>(&be);
  std::optional<read_ceiling_probe> probe;
  if (cpu) {
    probe.emplace(cpu->pool(), weight_bytes);
    f.packed_bytes = cpu->packed_size();
    f.packed_huge_bytes = cpu->packed_huge_page_bytes();
  }
  for (int r = 0; r < o.repeats; ++r) {
    const read_ceiling before = probe ? probe->measure(3) : read_ceiling{};
    if (probe && r == 0) {  // its pages are in place once it has been read
      f.read_bytes = weight_bytes;
      f.read_huge_bytes = probe->huge_page_bytes();
    }
    batch_generator gen(be, 512);
    generation_request req;
    req.prompt = random_prompt(16, hp.n_vocab, 100 + static_cast<uint32_t>(r));
    req.max_tokens = o.decode_tokens + 1;
    req.sampling = request_sampling(o, r);
    generation_stats st;
    if (auto e = first_error(gen.run({req}, &st), "decode"); !e) return make_error(e.error());
    f.tg.push_back(static_cast<double>(st.decode_steps) / st.decode_seconds);
    if (probe) {
      const read_ceiling after = probe->measure(3);
      const read_ceiling& c = after.gb_per_s > before.gb_per_s ? after : before;
      f.tg_ceiling_gb_per_s.push_back(c.gb_per_s);
      f.tg_ceiling_percent.push_back(c.tokens_per_s() > 0 ? 100.0 * f.tg.back() / c.tokens_per_s() : 0.0);
      std::fprintf(stderr, "  %s: decode run %d: %.1f tokens/s, %.0f%% of a %.1f GB/s read around it\n", name, r + 1,
                   f.tg.back(), f.tg_ceiling_percent.back(), c.gb_per_s);
    } else {
      std::fprintf(stderr, "  %s: decode run %d: %.1f tokens/s\n", name, r + 1, f.tg.back());
    }
  }
  // Long contexts: a prompt of long_tokens prefilled in chunks of 512 (llama-bench's default
  // micro-batch, which its pp test runs in), then decode_tokens decoded after such a prompt (its
  // tg test at -d long_tokens).
  for (int r = 0; r < o.repeats && o.long_tokens > 0; ++r) {
    batch_generator gen(be, 512);
    generation_request req;
    req.prompt = random_prompt(o.long_tokens, hp.n_vocab, 200 + static_cast<uint32_t>(r));
    req.max_tokens = o.decode_tokens + 1;
    req.sampling = request_sampling(o, r);
    generation_stats st;
    if (auto e = first_error(gen.run({req}, &st), "long context"); !e) return make_error(e.error());
    f.long_pp.push_back(st.prompt_tokens / st.prefill_seconds);
    f.long_tg.push_back(static_cast<double>(st.decode_steps) / st.decode_seconds);
    std::fprintf(stderr, "  %s: long context run %d: prefill of %d tokens %.1f tokens/s, decode after them %.1f tokens/s\n",
                 name, r + 1, o.long_tokens, f.long_pp.back(), f.long_tg.back());
  }
  // Batched decode: B sequences of batch_prompt + batch_gen tokens, decoding together. Each of
  // batch_repeats rounds runs every batch size once, back to back, so that a round's ratios to
  // batch 1 divide figures measured seconds apart (this machine's speed drifts over minutes);
  // figures and ratios are the medians over the rounds.
  probe.reset();  // its buffer is the weights' size
  std::vector<std::vector<double>> runs(o.batches.size()), ratios(o.batches.size());
  for (int b : o.batches)
    if (cpu && std::none_of(f.profiles.begin(), f.profiles.end(), [b](const auto& p) { return p.batch == b; }))
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
  f.agg_rounds = std::move(runs);
  return f;
}

}  // namespace

std::vector<floor_check> floors_of(const troupe_figures& r, const llama_figures& llama) {
  double llama_b16 = 0;
  for (auto [b, tps] : llama.batched)
    if (b == 16) llama_b16 = tps;
  auto vs = [](const char* what, double ours, double theirs, double floor) {
    return floor_check{what, theirs > 0, theirs > 0 ? ours / theirs : 0.0, floor};
  };
  std::vector<floor_check> out = {vs("prefill vs llama.cpp", median(r.pp), llama.pp.tps, 0.8),
                                  vs("decode vs llama.cpp", median(r.tg), llama.tg.tps, 0.8)};
  const std::vector<double>* b16 = nullptr;
  for (const auto& [b, each] : r.to_b1)
    if (b == 16) b16 = &each;
  const bool have16 = b16 && !b16->empty();
  out.push_back({"batch 16 vs its batch 1", have16, have16 ? median(*b16) : 0.0, 4.0});
  out.push_back(have16 ? vs("batch 16 vs llama.cpp", r.at(16), llama_b16, 3.0) : floor_check{"batch 16 vs llama.cpp", false, 0, 3.0});
  return out;
}

namespace {

void print_floors(const std::vector<troupe_figures>& runs, const llama_figures& llama) {
  std::printf("\nfloors (prefill and decode >= 0.8x llama.cpp; batch 16 >= 4x its own batch 1 and >= 3x llama.cpp's "
              "batched figure):\n");
  for (const auto& r : runs) {
    std::string line;
    for (const auto& c : floors_of(r, llama)) {
      line += "; " + c.what + " ";
      if (c.measured) line += fixed2(c.value) + "x, " + (c.met() ? "met" : "NOT met");
      else line += c.what.find("llama") != std::string::npos ? "(no llama.cpp figure)" : "(not measured: --batches needs 1 and 16)";
    }
    std::printf("  %s: %s\n", r.name().c_str(), line.substr(2).c_str());
  }
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::array<double, 3> load_average() {
  std::array<double, 3> l{-1, -1, -1};
  if (getloadavg(l.data(), 3) != 3) l = {-1, -1, -1};
  return l;
}

std::string load_text(const std::array<double, 3>& l) {
  return fixed2(l[0]) + " / " + fixed2(l[1]) + " / " + fixed2(l[2]);
}

}  // namespace

double long_kv_bytes(const troupe_figures& r, const bench_options& o) {
  return mean_decode_context(o.long_tokens, o.decode_tokens + 1) * static_cast<double>(r.kv_bytes_per_token);
}

double long_ceiling_tps(const read_ceiling& c, const troupe_figures& r, const bench_options& o) {
  return c.gb_per_s > 0 ? c.gb_per_s * 1e9 / (static_cast<double>(c.bytes) + long_kv_bytes(r, o)) : 0.0;
}

namespace {

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
  for (size_t i = 0; i < o.batches.size(); ++i)
    if (std::find(o.batches.begin(), o.batches.begin() + static_cast<std::ptrdiff_t>(i), o.batches[i]) !=
        o.batches.begin() + static_cast<std::ptrdiff_t>(i)) {
      std::fprintf(stderr, "troupe bench engine: --batches names batch size %d twice\n", o.batches[i]);
      return 1;
    }
  const int max_b = *std::max_element(o.batches.begin(), o.batches.end());
  // Every test's sequence must fit the model's context: each prefill run also samples a token,
  // and the decode tests generate one more token than they time after a prompt of 16 tokens (or
  // of --long-tokens).
  for (auto [what, n] : {std::pair<const char*, int64_t>{"--prefill-tokens + 1", int64_t{o.prefill_tokens} + 1},
                         {"16 + --decode-tokens + 1", 17 + int64_t{o.decode_tokens}},
                         {"--long-tokens + --decode-tokens + 1", int64_t{o.long_tokens} + o.decode_tokens + 1},
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
  if (o.kv != "f16") {  // q8 K/V needs the fast attention kernel only: without the fast matmul, in llama.cpp's order
    const bool fast = std::find(orders.begin(), orders.end(), matmul_order::fast) != orders.end() &&
                      fast_order_available();
    configs.emplace_back(fast ? matmul_order::fast : matmul_order::llama_cpp, true);
  }
  // Open the --json file before the run (minutes): a path that cannot be written fails now.
  std::ofstream json_out;
  if (!o.json.empty()) {
    json_out.open(o.json, std::ios::binary | std::ios::trunc);
    if (!json_out) {
      std::fprintf(stderr, "troupe bench engine: --json: cannot write '%s'\n", o.json.c_str());
      return 1;
    }
  }
  machine_state machine;
  machine.started_at = utc_now();
  machine.load_start = load_average();
  std::vector<troupe_figures> runs;
  read_ceiling ceiling;
  for (auto [order, kv_q8] : configs) {
    backend_options bo;
    bo.n_threads = threads;
    bo.matmul = order;
    bo.kv_q8 = kv_q8;
    bo.block_size = o.block_size;
    const int64_t kv_tokens = std::max(int64_t{max_b} * (o.batch_prompt + o.batch_gen + 32),
                                       int64_t{std::max(o.prefill_tokens, o.long_tokens)} + o.decode_tokens + 32);
    bo.kv_bytes = kv_tokens * hp.n_kv_dim() * hp.n_layer * 2 * 2 + (64ll << 20);
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
      ceiling = read_ceiling_probe(pool_owner->pool(), lm.value()->weights->weight_bytes()).measure(5);
    std::fprintf(stderr, "model %s: %d layers, %d embd, %d vocab; %d threads; matmul path %s, %s order%s\n",
                 lm.value()->id.c_str(), hp.n_layer, hp.n_embd, hp.n_vocab, threads, matmul_isa(), matmul_order_name(order),
                 kv_q8 ? ", q8 K/V" : "");
    auto figures = measure_troupe(*be.value(), o, order, kv_q8, lm.value()->weights->weight_bytes());
    if (!figures) {
      std::fprintf(stderr, "troupe bench engine: %s\n", figures.error().c_str());
      return 1;
    }
    runs.push_back(std::move(figures.value()));
  }
  if (runs.empty()) {
    // Tables of zeros would read as a measurement.
    std::fprintf(stderr,
                 "troupe bench engine: nothing to measure on this CPU (matmul path %s): --matmul %s --kv %s "
                 "needs kernels it lacks; --matmul llama.cpp --kv f16 runs everywhere\n",
                 matmul_isa(), o.matmul.c_str(), o.kv.c_str());
    return 1;
  }
  const long rss = peak_rss_kib();
  llama_figures llama;
  if (o.skip_llama) {
    llama.note = "llama.cpp skipped (--skip-llama)";
  } else {
    llama = run_llama({o.llama_bin, o.model, threads, o.repeats, o.prefill_tokens, o.decode_tokens, o.long_tokens,
                       o.batch_prompt, o.batch_gen, o.batches});
  }
  machine.finished_at = utc_now();
  machine.load_end = load_average();

  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf("\n## troupe bench engine — %s, %d threads, matmul path %s\n\n", lm.value()->id.c_str(), threads, matmul_isa());
  std::printf("CPU %s, %u logical CPUs; %s to %s; load average (1/5/15 min) %s at the start, %s at the end\n\n",
              machine.cpu.c_str(), std::thread::hardware_concurrency(), machine.started_at.c_str(),
              machine.finished_at.c_str(), load_text(machine.load_start).c_str(), load_text(machine.load_end).c_str());
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
  row("prefill pp" + std::to_string(o.prefill_tokens), [](const troupe_figures& r) { return median(r.pp); }, llama.pp.tps);
  row("decode tg" + std::to_string(o.decode_tokens) + " (1 sequence)", [](const troupe_figures& r) { return median(r.tg); },
      llama.tg.tps);
  if (o.long_tokens > 0) {
    row("prefill pp" + std::to_string(o.long_tokens), [](const troupe_figures& r) { return median(r.long_pp); },
        llama.long_pp.tps);
    row("decode tg" + std::to_string(o.decode_tokens) + " at depth " + std::to_string(o.long_tokens),
        [](const troupe_figures& r) { return median(r.long_tg); }, llama.long_tg.tps);
  }
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
    for (const auto& r : runs) {
      std::printf("%s: decode tg%d %.1f tokens/s = %.0f%% of that ceiling", r.name().c_str(), o.decode_tokens,
                  median(r.tg), 100.0 * median(r.tg) / ceiling.tokens_per_s());
      if (!r.tg_ceiling_percent.empty()) {
        std::string each;
        for (size_t i = 0; i < r.tg_ceiling_percent.size(); ++i)
          each += (i ? ", " : "") + std::to_string(std::lround(r.tg_ceiling_percent[i])) + "% of " +
                  fixed2(r.tg_ceiling_gb_per_s[i]) + " GB/s";
        std::printf("; against a read just before and after each run: median %.0f%% (%s)", median(r.tg_ceiling_percent),
                    each.c_str());
      }
      std::printf("\n");
    }
    for (const auto& r : runs)
      if (r.packed_bytes)
        std::printf("%s: 2 MiB pages back %.1f of the packed weights' %.1f MB and %.1f of the paired read's %.1f MB "
                    "(transparent huge pages: %s)\n",
                    r.name().c_str(), r.packed_huge_bytes / 1e6, r.packed_bytes / 1e6, r.read_huge_bytes / 1e6,
                    r.read_bytes / 1e6, transparent_huge_pages_mode().c_str());
    // At depth long_tokens a step also reads the sequence's K/V, as many bytes again as the
    // weights at 4096 tokens of fp16 K/V: the ceiling there counts both.
    for (const auto& r : runs)
      if (!r.long_tg.empty())
        std::printf("%s: decode tg%d at depth %d %.1f tokens/s = %.0f%% of the ceiling of a step reading the weights and "
                    "%.1f MB of K/V (%.0f tokens/s)\n",
                    r.name().c_str(), o.decode_tokens, o.long_tokens, median(r.long_tg),
                    100.0 * median(r.long_tg) / long_ceiling_tps(ceiling, r, o), long_kv_bytes(r, o) / 1e6,
                    long_ceiling_tps(ceiling, r, o));
  }
  print_floors(runs, llama);
  for (const auto& r : runs) print_profiles(r, o, ceiling);
  std::printf("\npeak RSS: %.1f MiB\n", static_cast<double>(rss) / 1024.0);
  for (const auto& r : runs)
    std::printf("%s: KV bytes per token %zu (%s K and V, %d layers x %d dims); peak KV blocks used: %d of %d (%d tokens/block, %lld slots wasted)\n",
                r.name().c_str(), r.kv_bytes_per_token, r.kv_q8 ? "q8" : "fp16", hp.n_layer, hp.n_kv_dim(), r.peak.blocks_used,
                r.peak.blocks_total, r.block_size, static_cast<long long>(r.peak.slots_wasted));
  if (!llama.note.empty()) std::printf("note: %s\n", llama.note.c_str());
  std::optional<quality_figures> quality;
  if (o.eval_windows > 0) {
    quality = measure_quality(*lm.value(), o.eval_text, threads, o.eval_ctx, o.eval_windows);
    print_quality(*quality);
  }
  if (json_out.is_open()) {
    json_out << engine_json(o, *lm.value(), threads, machine, ceiling, runs, llama, quality ? &*quality : nullptr, rss)
             << "\n";
    json_out.close();
    if (!json_out) {
      std::fprintf(stderr, "troupe bench engine: --json: writing '%s' failed\n", o.json.c_str());
      return 1;
    }
    std::printf("figures written to %s\n", o.json.c_str());
  }
  return 0;
}

troupe::app::register_bench reg("engine", "Engine throughput (prefill, decode, long contexts, batched decode) against llama.cpp",
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
                                   sub.add_option("--long-tokens", o->long_tokens, "Long-context tests: prefill of a prompt of this many tokens, and decode after one (0 = skip)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
                                   sub.add_flag("--skip-llama", o->skip_llama, "Do not run llama.cpp");
                                   sub.add_option("--eval-text", o->eval_text, "Text the quality table scores (as troupe eval --file)")->capture_default_str();
                                   sub.add_option("--eval-windows", o->eval_windows, "Windows of the text the quality table scores per path (0 = no table)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
                                   sub.add_option("--eval-ctx", o->eval_ctx, "Tokens per window of the quality table")->check(CLI::Range(16, 1 << 20))->capture_default_str();
                                   sub.add_option("--json", o->json, "Also write every figure of the run to this JSON file (bench/plot.py draws it; layout below)");
                                   sub.footer(engine_json_help);
                                   sub.add_option("--temperature", o->sampling.temperature, "Decode tests sample at this temperature (0 = greedy)")->capture_default_str();
                                   sub.add_option("--top-k", o->sampling.top_k, "Decode tests keep the top k candidates (0 = all)")->capture_default_str();
                                   sub.add_option("--top-p", o->sampling.top_p, "Decode tests keep the top p of the probability mass (1 = all)")->capture_default_str();
                                   return [o]() { return run_bench_engine(*o); };
                                 });

}  // namespace

}  // namespace troupe::bench::engine

// `troupe bench engine`: prefill, single-sequence decode (also at a long context) and batched
// decode throughput of the CPU backend, with llama.cpp's llama-bench and llama-batched-bench run
// on the same file with the same thread count in the same run, and the ratios between them;
// --json writes every figure the run prints into one document (bench/plot.py draws it).
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "app/bench_command.hpp"
#include "bench/cpu_name.hpp"
#include "bench/llama_runner.hpp"
#include "bench/quality_bench.hpp"
#include "bench/read_ceiling.hpp"
#include "model/huge_pages.hpp"
#include "model/batch_generator.hpp"
#include "model/cpu_backend.hpp"
#include "model/loaded_model.hpp"
#include "model/matmul.hpp"
#include "model/matmul_amx.hpp"
#include "model/paged_attention.hpp"
#include "common/result.hpp"
#include "model/step_profile.hpp"
#include "net/json_writer.hpp"

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
  // The long-context tests: a prompt of this many tokens prefilled, and decode_tokens decoded
  // after a prompt of this many (0 skips both).
  int long_tokens = 4096;
  int block_size = backend_options{}.block_size;  // KV block size in tokens (the server's default)
  bool skip_llama = false;
  std::string json;  // where --json writes the run's figures (empty: nowhere)
  // The quality table (quality_bench.hpp): windows of the eval text scored per path (0: none).
  std::string eval_text = "tests/fixtures/eval/gpl-3.txt";
  int eval_windows = 3;
  int eval_ctx = 256;
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

// Troupe's figures in one matmul order, on a backend built for it.
struct troupe_figures {
  matmul_order order = matmul_order::llama_cpp;
  bool kv_q8 = false;
  std::string name() const { return std::string(matmul_order_name(order)) + " order" + (kv_q8 ? ", q8 K/V" : ""); }
  std::vector<double> pp, tg;
  // Each decode run's figure as a percentage of the streaming-read ceiling measured just before
  // and after it (the higher of the two): the host's bandwidth drifts over minutes, and a ratio of
  // figures taken seconds apart is steadier than one of figures taken minutes apart.
  std::vector<double> tg_ceiling_percent, tg_ceiling_gb_per_s;
  std::vector<double> long_pp, long_tg;  // the long-context tests (empty when skipped)
  std::vector<std::pair<int, double>> agg;  // batch size, aggregate decode tokens/s
  std::vector<std::vector<double>> agg_rounds;  // per batch size (as agg), each round's figure
  std::vector<std::pair<int, std::vector<double>>> to_b1;  // batch size, each round's ratio to batch 1
  kv_usage peak;
  // The last round's decode steps at every batch size, phase by phase, and their mean wall time
  // (forward plus sampling and bookkeeping).
  struct profiled_batch {
    int batch = 0;
    step_profile profile;
    double step_seconds = 0;
  };
  std::vector<profiled_batch> profiles;
  size_t kv_bytes_per_token = 0;
  int32_t block_size = 0;
  // How many bytes 2 MiB pages back (model/huge_pages.hpp): of the packed weights, and of the
  // buffer the paired ceiling reads (0 of 0 where there is none).
  size_t packed_bytes = 0, packed_huge_bytes = 0, read_bytes = 0, read_huge_bytes = 0;
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

// The mean number of positions a decode step attends to when a sequence of `prompt` tokens
// generates `max_tokens`: the first comes from prefill, then a decode step at position p attends
// to p + 1 positions, p from prompt to prompt + max_tokens - 2. The batched tests' sequences run
// in lockstep (no stop token ends one early), so every step of theirs has this mean.
double mean_decode_context(int prompt, int max_tokens) { return prompt + 1 + (max_tokens - 2) / 2.0; }

// Short keys for step_profile's phases, in its order (for --json).
constexpr std::array<const char*, step_profile::n_phases> phase_keys = {"qkv",  "attention", "wo",   "gate_up",
                                                                         "down", "head",      "other"};
constexpr bool all_named(const std::array<const char*, step_profile::n_phases>& a) {
  for (const char* k : a)
    if (!k) return false;
  return true;
}
static_assert(all_named(phase_keys), "a step_profile phase without a key here");

// One profiled batch size's decode step, in milliseconds, with what its attention reads.
struct step_breakdown {
  int batch = 0;
  int64_t steps = 0;
  double step_ms = 0;                               // mean wall time of a step
  std::array<double, step_profile::n_phases> ms{};  // mean per phase
  double outside_ms = 0;                            // sampling, batch setup: the step outside forward
  double kv_bytes = 0;                              // K/V bytes attention reads in a step
  double kv_gb_per_s() const {
    return ms[step_profile::attention] > 0 ? kv_bytes / (ms[step_profile::attention] * 1e-3) / 1e9 : 0.0;
  }
};

std::vector<step_breakdown> breakdowns(const troupe_figures& r, const bench_options& o) {
  std::vector<step_breakdown> out;
  for (const auto& pb : r.profiles) {
    const auto& p = pb.profile;
    if (p.steps == 0 || pb.step_seconds <= 0) continue;
    step_breakdown b;
    b.batch = pb.batch;
    b.steps = p.steps;
    b.step_ms = pb.step_seconds * 1e3;
    const double per = 1e3 / static_cast<double>(p.steps);
    for (size_t i = 0; i < b.ms.size(); ++i) b.ms[i] = p.seconds[i] * per;
    b.outside_ms = b.step_ms - p.total() * per;
    b.kv_bytes = static_cast<double>(pb.batch) * mean_decode_context(o.batch_prompt, o.batch_gen) *
                 static_cast<double>(r.kv_bytes_per_token);
    out.push_back(b);
  }
  return out;
}

// Each configuration's decode steps phase by phase at every batch size (cpu_backend's profile of
// the last round), what attention's K/V reads reach against the streaming-read ceiling, and how
// each phase grows from batch 16 to 64.
void print_profiles(const troupe_figures& r, const bench_options& o, const read_ceiling& ceiling) {
  const auto bs = breakdowns(r, o);
  if (bs.empty()) return;
  std::printf("\n%s: a decode step by phase, ms (%% of the step); the mean of the last round's steps at each batch size\n\n",
              r.name().c_str());
  std::string head = "| phase |", rule = "|---|";
  for (const auto& b : bs) {
    head += " B=" + std::to_string(b.batch) + " |";
    rule += "---|";
  }
  std::printf("%s\n%s\n", head.c_str(), rule.c_str());
  auto row = [&](const char* what, auto value) {
    std::printf("| %s |", what);
    for (const auto& b : bs) std::printf(" %.3f (%.1f%%) |", value(b), 100.0 * value(b) / b.step_ms);
    std::printf("\n");
  };
  for (size_t i = 0; i < step_profile::n_phases; ++i)
    row(step_profile::names[i], [i](const step_breakdown& b) { return b.ms[i]; });
  row("sampling, batch setup (outside forward)", [](const step_breakdown& b) { return b.outside_ms; });
  std::printf("| whole step |");
  for (const auto& b : bs) std::printf(" %.3f |", b.step_ms);
  std::printf("\n| per token (step / B) |");
  for (const auto& b : bs) std::printf(" %.3f |", b.step_ms / b.batch);
  std::printf("\n| steps profiled |");
  for (const auto& b : bs) std::printf(" %lld |", static_cast<long long>(b.steps));
  std::printf("\n\nattention's K/V reads (%zu bytes a position, a mean of %.0f positions per sequence):\n",
              r.kv_bytes_per_token, mean_decode_context(o.batch_prompt, o.batch_gen));
  for (const auto& b : bs) {
    std::printf("  B=%d: %.1f MB a step in %.3f ms = %.1f GB/s", b.batch, b.kv_bytes / 1e6, b.ms[step_profile::attention],
                b.kv_gb_per_s());
    if (ceiling.gb_per_s > 0) std::printf(", %.0f%% of the %.1f GB/s streaming read", 100.0 * b.kv_gb_per_s() / ceiling.gb_per_s, ceiling.gb_per_s);
    std::printf("\n");
  }
  const step_breakdown *b16 = nullptr, *b64 = nullptr;
  for (const auto& b : bs) {
    if (b.batch == 16) b16 = &b;
    if (b.batch == 64) b64 = &b;
  }
  if (b16 && b64) {
    std::printf("from batch 16 to 64 (4x the tokens a step) each phase's step time grows:");
    for (size_t i = 0; i < step_profile::n_phases; ++i)
      if (b16->ms[i] > 0) std::printf(" %s %.2fx;", phase_keys[i], b64->ms[i] / b16->ms[i]);
    std::printf(" whole step %.2fx, so batch 64 makes %.2fx batch 16's tokens/s\n", b64->step_ms / b16->step_ms,
                4.0 * b16->step_ms / b64->step_ms);
  }
}

// The engine issue's floors, each configuration against them: prefill and single-sequence
// decode >= 0.8x llama.cpp, aggregate decode at batch 16 >= 4x the same configuration's batch 1
// (the median of the rounds' ratios) and >= 3x llama-batched-bench's figure.
struct floor_check {
  std::string what;  // "prefill vs llama.cpp", ...
  bool measured = false;
  double value = 0, floor = 0;
  bool met() const { return measured && value >= floor; }
};

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

// Where and when a run ran: the figures move with the machine and its neighbours' load.
struct machine_state {
  std::string cpu = cpu_name();
  std::string started_at, finished_at;  // UTC, ISO 8601
  std::array<double, 3> load_start{}, load_end{};  // 1, 5 and 15 minute load averages
};

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

// The K/V bytes one decode step of the long-context test reads (the mean over its steps).
double long_kv_bytes(const troupe_figures& r, const bench_options& o) {
  return mean_decode_context(o.long_tokens, o.decode_tokens + 1) * static_cast<double>(r.kv_bytes_per_token);
}

double long_ceiling_tps(const read_ceiling& c, const troupe_figures& r, const bench_options& o) {
  return c.gb_per_s > 0 ? c.gb_per_s * 1e9 / (static_cast<double>(c.bytes) + long_kv_bytes(r, o)) : 0.0;
}

// --json: every figure the run prints, in one document. The layout is documented in --help
// (engine_json_help) and read by bench/plot.py; a change to it that a reader must know of
// bumps k_engine_json_version.
constexpr int k_engine_json_version = 1;

const char* engine_json_help =
    "--json FILE writes the run's figures as one JSON object: schema \"troupe.bench.engine\", schema_version 1; "
    "machine (cpu, logical_cpus, started_at, finished_at, load_average_start / _end: 1, 5, 15 min); model (id, path, "
    "layers, embd, vocab, weight_bytes); threads; matmul_isa; amx (available, line: the AMX path or why not); options "
    "(every test's size and count); ceiling (streaming read of the weights' bytes: bytes, gb_per_s, tokens_per_s); "
    "configurations[] (name, matmul_order, kv; tests prefill, decode, long_prefill, long_decode: tokens, depth, runs "
    "(tokens/s), median, llama_cpp, ratio, ceiling_percent for decodes (decode also ceiling_percent_paired_runs, ceiling_paired_gb_per_s: each run against a read just before and after it, and ceiling_percent_paired, their median); batched[]: batch, rounds, median, "
    "ratio_to_batch1 and its rounds, llama_cpp, ratio, step (decode step phase by phase in ms: phases[] of key, label, "
    "ms; outside_forward_ms, step_ms, steps, kv_bytes, kv_gb_per_s, kv_ceiling_percent); floors[]; kv_bytes_per_token, "
    "block_size, peak_kv); llama_cpp (available, note, prefill, decode, long_prefill, long_decode: tokens_per_s, "
    "stddev; batched[]: batch, tokens_per_s); quality (null with --eval-windows 0; text, n_ctx, windows, "
    "tokens_scored, ppl_reference, paths[]: name, mean_kl, p99_kl, max_kl, top1_agreement, ppl, ppl_ratio; notes[]; "
    "or error); peak_rss_mib. A figure not measured is null.";

std::string engine_json(const bench_options& o, const loaded_model& lm, int threads, const machine_state& m,
                        const read_ceiling& ceiling, const std::vector<troupe_figures>& runs, const llama_figures& llama,
                        const quality_figures* quality, long rss_kib) {
  const auto& hp = lm.weights->params();
  troupe::net::json_writer w;
  // A figure not measured (0) is null, not 0 tokens/s.
  auto figure = [&w](std::string_view k, double v) {
    w.key(k);
    if (v > 0) w.value(v);
    else w.null();
  };
  auto doubles = [&w](std::string_view k, const std::vector<double>& v) {
    w.key(k).begin_array();
    for (double x : v) w.value(x);
    w.end_array();
  };
  auto loads = [&w](std::string_view k, const std::array<double, 3>& l) {
    w.key(k).begin_array();
    for (double x : l) {
      if (x >= 0) w.value(x);
      else w.null();
    }
    w.end_array();
  };
  auto llama_batched = [&llama](int b) {
    for (auto [lb, lt] : llama.batched)
      if (lb == b) return lt;
    return 0.0;
  };
  w.begin_object();
  w.field("schema", "troupe.bench.engine").field("schema_version", int64_t{k_engine_json_version});
  w.key("machine").begin_object();
  w.field("cpu", m.cpu).field("logical_cpus", int64_t{std::thread::hardware_concurrency()});
  w.field("started_at", m.started_at).field("finished_at", m.finished_at);
  loads("load_average_start", m.load_start);
  loads("load_average_end", m.load_end);
  w.end_object();
  w.key("model").begin_object();
  w.field("id", lm.id).field("path", o.model).field("layers", int64_t{hp.n_layer}).field("embd", int64_t{hp.n_embd});
  w.field("vocab", int64_t{hp.n_vocab}).field("weight_bytes", static_cast<uint64_t>(lm.weights->weight_bytes()));
  w.end_object();
  w.field("threads", int64_t{threads}).field("matmul_isa", matmul_isa());
  w.key("amx").begin_object();
  w.field("available", amx_support().available).field("line", amx_path_line());
  w.end_object();
  w.key("options").begin_object();
  w.field("prefill_tokens", int64_t{o.prefill_tokens}).field("decode_tokens", int64_t{o.decode_tokens});
  w.field("long_tokens", int64_t{o.long_tokens}).field("batch_prompt", int64_t{o.batch_prompt});
  w.field("batch_gen", int64_t{o.batch_gen}).field("repeats", int64_t{o.repeats});
  w.field("batch_repeats", int64_t{o.batch_repeats}).field("block_size", int64_t{o.block_size});
  w.key("batches").begin_array();
  for (int b : o.batches) w.value(int64_t{b});
  w.end_array();
  w.field("temperature", static_cast<double>(o.sampling.temperature)).field("top_k", int64_t{o.sampling.top_k});
  w.field("top_p", static_cast<double>(o.sampling.top_p));
  w.end_object();
  w.key("ceiling");
  if (ceiling.bytes) {
    w.begin_object();
    w.field("bytes", static_cast<uint64_t>(ceiling.bytes)).field("threads", int64_t{ceiling.threads});
    w.field("gb_per_s", ceiling.gb_per_s).field("tokens_per_s", ceiling.tokens_per_s());
    w.end_object();
  } else {
    w.null();
  }

  w.key("configurations").begin_array();
  for (const auto& r : runs) {
    w.begin_object();
    w.field("name", r.name()).field("matmul_order", matmul_order_name(r.order)).field("kv", r.kv_q8 ? "q8" : "f16");
    // One single-sequence test: its runs, median, llama.cpp's figure and the ratio.
    auto test = [&](const char* key, int tokens, int depth, const std::vector<double>& each, double reference,
                    double ceiling_tps) {
      w.key(key);
      if (each.empty()) {
        w.null();
        return;
      }
      w.begin_object();
      w.field("tokens", int64_t{tokens}).field("depth", int64_t{depth});
      doubles("runs", each);
      w.field("median", median(each));
      figure("llama_cpp", reference);
      figure("ratio", reference > 0 ? median(each) / reference : 0.0);
      if (ceiling_tps >= 0) figure("ceiling_percent", ceiling_tps > 0 ? 100.0 * median(each) / ceiling_tps : 0.0);
      if (&each == &r.tg && !r.tg_ceiling_percent.empty()) {
        doubles("ceiling_percent_paired_runs", r.tg_ceiling_percent);
        doubles("ceiling_paired_gb_per_s", r.tg_ceiling_gb_per_s);
        figure("ceiling_percent_paired", median(r.tg_ceiling_percent));
        w.field("packed_bytes", static_cast<uint64_t>(r.packed_bytes))
            .field("packed_huge_page_bytes", static_cast<uint64_t>(r.packed_huge_bytes))
            .field("paired_read_huge_page_bytes", static_cast<uint64_t>(r.read_huge_bytes));
      }
      w.end_object();
    };
    test("prefill", o.prefill_tokens, 0, r.pp, llama.pp.tps, -1);
    test("decode", o.decode_tokens, 16, r.tg, llama.tg.tps, ceiling.tokens_per_s());
    test("long_prefill", o.long_tokens, 0, r.long_pp, llama.long_pp.tps, -1);
    test("long_decode", o.decode_tokens, o.long_tokens, r.long_tg, llama.long_tg.tps, long_ceiling_tps(ceiling, r, o));

    const auto bs = breakdowns(r, o);
    w.key("batched").begin_array();
    for (size_t i = 0; i < r.agg.size(); ++i) {
      const int b = r.agg[i].first;
      w.begin_object();
      w.field("batch", int64_t{b});
      doubles("rounds", i < r.agg_rounds.size() ? r.agg_rounds[i] : std::vector<double>{});
      w.field("median", r.agg[i].second);
      const std::vector<double>* each = nullptr;
      for (const auto& [bb, e] : r.to_b1)
        if (bb == b) each = &e;
      w.key("ratio_to_batch1");
      if (each && !each->empty()) w.value(median(*each));
      else w.null();
      doubles("ratio_to_batch1_rounds", each ? *each : std::vector<double>{});
      figure("llama_cpp", llama_batched(b));
      figure("ratio", llama_batched(b) > 0 ? r.agg[i].second / llama_batched(b) : 0.0);
      w.key("step");
      const step_breakdown* sb = nullptr;
      for (const auto& x : bs)
        if (x.batch == b) sb = &x;
      if (!sb) {
        w.null();
      } else {
        w.begin_object();
        w.field("steps", int64_t{sb->steps}).field("step_ms", sb->step_ms);
        w.key("phases").begin_array();
        for (size_t p = 0; p < step_profile::n_phases; ++p) {
          w.begin_object();
          w.field("key", phase_keys[p]).field("label", step_profile::names[p]).field("ms", sb->ms[p]);
          w.end_object();
        }
        w.end_array();
        w.field("outside_forward_ms", sb->outside_ms).field("kv_bytes", sb->kv_bytes);
        figure("kv_gb_per_s", sb->kv_gb_per_s());
        figure("kv_ceiling_percent", ceiling.gb_per_s > 0 ? 100.0 * sb->kv_gb_per_s() / ceiling.gb_per_s : 0.0);
        w.end_object();
      }
      w.end_object();
    }
    w.end_array();
    w.key("floors").begin_array();
    for (const auto& c : floors_of(r, llama)) {
      w.begin_object();
      w.field("what", c.what).field("floor", c.floor);
      w.key("value");
      if (c.measured) w.value(c.value);
      else w.null();
      w.key("met");
      if (c.measured) w.value(c.met());
      else w.null();
      w.end_object();
    }
    w.end_array();
    w.field("kv_bytes_per_token", static_cast<uint64_t>(r.kv_bytes_per_token)).field("block_size", int64_t{r.block_size});
    w.key("peak_kv").begin_object();
    w.field("blocks_used", int64_t{r.peak.blocks_used}).field("blocks_total", int64_t{r.peak.blocks_total});
    w.field("slots_wasted", static_cast<int64_t>(r.peak.slots_wasted));
    w.end_object();
    w.end_object();
  }
  w.end_array();

  w.key("llama_cpp").begin_object();
  const bool ran = !llama.batched.empty() || llama.pp.tps > 0 || llama.tg.tps > 0;
  w.field("available", ran);
  w.key("note");
  if (llama.note.empty()) w.null();
  else w.value(llama.note);
  auto ltest = [&](const char* key, const llama_test& t) {
    w.key(key);
    if (t.tps <= 0) {
      w.null();
      return;
    }
    w.begin_object();
    w.field("tokens_per_s", t.tps).field("stddev", t.sd);
    w.end_object();
  };
  ltest("prefill", llama.pp);
  ltest("decode", llama.tg);
  ltest("long_prefill", llama.long_pp);
  ltest("long_decode", llama.long_tg);
  w.key("batched").begin_array();
  for (auto [b, tps] : llama.batched) {
    w.begin_object();
    w.field("batch", int64_t{b}).field("tokens_per_s", tps);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  if (quality) write_quality(w, *quality);
  else w.key("quality").null();
  w.field("peak_rss_mib", static_cast<double>(rss_kib) / 1024.0);
  w.end_object();
  return w.take();
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
  if (o.kv != "f16") {  // q8 K/V needs AVX-512 only: without the fast kernels, in llama.cpp's order
    const bool fast = std::find(orders.begin(), orders.end(), matmul_order::fast) != orders.end() &&
                      std::string(matmul_isa()) == "avx512vnni";
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

}  // namespace troupe::bench

// `troupe bench cache`: the semantic cache's costs. Embedding latency of the MiniLM embedder per
// question (short, medium and window-filling texts), vector-index lookup at 10k and 100k entries
// (random unit vectors), and the cache's own lookup paths with the real embedder: an exact hit, a
// semantic hit (embedding included) and a miss; then end to end through the pipeline with the
// chat model: time to first token of a miss (the model runs) against an exact and a semantic hit
// (replayed by the streamer). Target: a hit under 20 ms including the embedding.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/client.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "app/bench_command.hpp"
#include "cache/embed/embedder.hpp"
#include "cache/embed/minilm_embedder.hpp"
#include "cache/semantic/semantic_cache.hpp"
#include "cache/semantic/vector_index.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::cache;
using clock_type = std::chrono::steady_clock;

struct bench_options {
  std::string embedder_dir = "models/all-MiniLM-L6-v2";
  int threads = 1;
  std::string weights = "f16";
  int embeds = 100;
  int queries = 2000;
  std::vector<int> index_sizes = {10000, 100000};
  int cache_entries = 200;
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int e2e_questions = 16;   // end-to-end: distinct questions, each asked, repeated and paraphrased
  int e2e_max_tokens = 32;
};

// CPU time of the calling thread: with --threads 1 that is all of an embedding's work, and it
// does not grow when other processes share the cores (wall time does).
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// Wall times on a shared machine say little without the load they were taken under.
std::string load_note() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) < 1) return "load average unknown";
  char buf[96];
  std::snprintf(buf, sizeof buf, "load average %.1f on %u cores", l[0], std::thread::hardware_concurrency());
  return buf;
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

struct percentiles {
  double p50 = 0, p99 = 0, mean = 0;
};

percentiles summarize(std::vector<double> v) {
  percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = v[v.size() / 2];
  p.p99 = v[std::min(v.size() - 1, static_cast<size_t>(static_cast<double>(v.size()) * 0.99))];
  for (double x : v) p.mean += x;
  p.mean /= static_cast<double>(v.size());
  return p;
}

const std::vector<std::string>& topics() {
  static const std::vector<std::string> t = {
      "the capital of France", "photosynthesis", "a binary search tree", "the French revolution", "compound interest",
      "black holes", "sourdough bread", "the TCP handshake", "vitamin D", "the stock market", "quantum computing",
      "the Roman empire", "climate change", "a hash table", "jazz music", "the immune system", "electric cars",
      "the water cycle", "machine learning", "the Pythagorean theorem", "coffee roasting", "the moon landing",
      "public key cryptography", "marathon training", "the printing press", "volcanoes", "the human genome",
      "inflation", "the Great Wall of China", "neural networks", "chess openings", "the Renaissance"};
  return t;
}

std::string question(size_t i) {
  static const std::vector<std::string> forms = {"What is {}?", "Explain {} in simple terms.", "Tell me about {}.",
                                                 "Why does {} matter?", "Give me three facts about {}."};
  const auto& t = topics();
  std::string f = forms[(i / t.size()) % forms.size()];
  return f.replace(f.find("{}"), 2, t[i % t.size()]);
}

std::string long_text(size_t words) {
  std::string s;
  std::mt19937 rng(7);
  const auto& t = topics();
  while (s.size() < words * 6) s += t[rng() % t.size()] + " and ";
  return s;
}

// A light paraphrase: lower case, no final punctuation, a filler word.
std::string paraphrase(std::string q) {
  std::transform(q.begin(), q.end(), q.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!q.empty()) q.pop_back();
  return "so, " + q;
}

int run_bench_cache(const bench_options& o) {
  embedder_options eo;
  eo.model_dir = o.embedder_dir;
  eo.n_threads = o.threads;
  eo.weights = o.weights;
  auto loaded = minilm_embedder::load(eo);
  if (!loaded) {
    std::fprintf(stderr, "troupe bench cache: %s\n", loaded.error().c_str());
    return 1;
  }
  std::shared_ptr<minilm_embedder> emb(std::move(loaded.value()));
  std::printf("embedder %s: %d dimensions, %d threads, matmul path %s; %s\n", emb->name().c_str(), emb->dimension(),
              o.threads, troupe::model::matmul_isa(), load_note().c_str());

  // 1. Embedding latency by text length.
  (void)emb->embed("warm up");
  std::printf("\nembedding latency per question (ms; cpu = the calling thread's CPU time)\n  %-26s %7s %8s %8s %8s %8s\n", "text",
              "tokens", "p50", "p99", "mean", "cpu p50");
  struct text_case {
    std::string label;
    std::vector<std::string> texts;
  };
  std::vector<text_case> cases;
  text_case shorter{"short questions", {}};
  for (int i = 0; i < o.embeds; ++i) shorter.texts.push_back(question(static_cast<size_t>(i)));
  cases.push_back(shorter);
  text_case medium{"~60-token paragraphs", {}};
  for (int i = 0; i < o.embeds; ++i) medium.texts.push_back(question(static_cast<size_t>(i)) + " " + long_text(40).substr(static_cast<size_t>(i % 7), 230));
  cases.push_back(medium);
  text_case full{"256-token window (cut)", {}};
  for (int i = 0; i < std::max(10, o.embeds / 4); ++i) full.texts.push_back(long_text(400).substr(static_cast<size_t>(i)));
  cases.push_back(full);
  for (const auto& c : cases) {
    std::vector<double> t, cpu;
    size_t tokens = 0;
    for (const auto& text : c.texts) {
      tokens += emb->token_ids(text).size();
      const auto t0 = clock_type::now();
      const double c0 = thread_cpu_ms();
      auto v = emb->embed(text);
      cpu.push_back(thread_cpu_ms() - c0);
      t.push_back(ms_since(t0));
      if (!v) {
        std::fprintf(stderr, "troupe bench cache: %s\n", v.error().c_str());
        return 1;
      }
    }
    const auto p = summarize(t);
    std::printf("  %-26s %7zu %8.2f %8.2f %8.2f %8.2f\n", c.label.c_str(), tokens / c.texts.size(), p.p50, p.p99, p.mean,
                summarize(cpu).p50);
  }

  // 2. Index lookup on random unit vectors.
  std::printf("\nvector index lookup, %d dimensions, k = 4 (ms; recall@1 of a stored vector's own label,\n"
              "and of the exact nearest neighbour for a perturbed query, against a full scan)\n",
              emb->dimension());
  std::printf("  %9s %9s %9s %9s %11s %12s\n", "entries", "build s", "p50", "p99", "own recall", "near recall");
  const int dim = emb->dimension();
  for (int n : o.index_sizes) {
    std::mt19937 rng(42);
    std::normal_distribution<float> nd;
    std::vector<float> data(static_cast<size_t>(n) * static_cast<size_t>(dim));
    for (auto& x : data) x = nd(rng);
    for (int i = 0; i < n; ++i) {
      std::vector<float> v(data.begin() + static_cast<std::ptrdiff_t>(i) * dim, data.begin() + static_cast<std::ptrdiff_t>(i + 1) * dim);
      l2_normalize(v);
      std::copy(v.begin(), v.end(), data.begin() + static_cast<std::ptrdiff_t>(i) * dim);
    }
    index_options io;
    io.dimension = dim;
    vector_index idx(io);
    auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) idx.add(static_cast<uint64_t>(i + 1), data.data() + static_cast<size_t>(i) * static_cast<size_t>(dim));
    const double build_s = ms_since(t0) / 1000.0;
    std::vector<double> t;
    int own = 0, near = 0, near_checked = 0;
    for (int q = 0; q < o.queries; ++q) {
      const int target = static_cast<int>(rng() % static_cast<uint32_t>(n));
      std::vector<float> query(data.begin() + static_cast<std::ptrdiff_t>(target) * dim, data.begin() + static_cast<std::ptrdiff_t>(target + 1) * dim);
      const bool perturb = q % 2 == 1;  // half exact vectors, half paraphrase-like neighbours
      if (perturb) {
        for (auto& x : query) x += 0.02f * nd(rng);
        l2_normalize(query);
      }
      t0 = clock_type::now();
      auto r = idx.search(query.data(), 4);
      t.push_back(ms_since(t0));
      if (!perturb) {
        own += !r.empty() && r[0].label == static_cast<uint64_t>(target + 1);
      } else if (q % 20 == 1) {  // full scans are slow at 100k: check one in ten perturbed queries
        float best = -2;
        uint64_t best_label = 0;
        for (int i = 0; i < n; ++i) {
          const float s = dot(query.data(), data.data() + static_cast<size_t>(i) * static_cast<size_t>(dim), dim);
          if (s > best) best = s, best_label = static_cast<uint64_t>(i + 1);
        }
        ++near_checked;
        near += !r.empty() && r[0].label == best_label;
      }
    }
    const auto p = summarize(t);
    std::printf("  %9d %9.1f %9.4f %9.4f %10.1f%% %11.1f%%\n", n, build_s, p.p50, p.p99, 100.0 * own / ((o.queries + 1) / 2),
                100.0 * near / std::max(1, near_checked));
  }

  // 3. The cache's lookup paths with the real embedder, on a fresh store.
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-bench-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    semantic_cache_config cfg;
    cfg.path = dir.string();
    cfg.async_insert = false;
    struct shared_embedder final : embedder {
      std::shared_ptr<minilm_embedder> e;
      troupe::result<std::vector<float>> embed(std::string_view t) override { return e->embed(t); }
      bool fits(std::string_view t) const override { return e->fits(t); }
      int dimension() const override { return e->dimension(); }
      std::string name() const override { return e->name(); }
    };
    auto wrapped = std::make_unique<shared_embedder>();
    wrapped->e = emb;
    semantic_cache cache(cfg, std::move(wrapped));
    if (!cache.enabled()) {
      std::fprintf(stderr, "troupe bench cache: %s\n", cache.status().c_str());
      return 1;
    }
    uint64_t id = 1;
    auto request = [&](std::string text) {
      auto r = cache_query::from_prompt(std::move(text));
      r.id = id++;
      r.model = "bench";
      r.max_tokens = 128;
      return r;
    };
    const int n = std::min<int>(o.cache_entries, static_cast<int>(topics().size() * 5));
    for (int i = 0; i < n; ++i) {
      auto r = request(question(static_cast<size_t>(i)));
      if (cache.lookup(r)) continue;
      finished_answer c;
      c.id = r.id;
      c.finish_reason = "stop";
      c.tokens.assign(100, 42);
      cache.on_closed(c);
    }
    std::vector<double> exact, semantic, miss, exact_cpu, semantic_cpu, miss_cpu;
    int semantic_served = 0;
    for (int i = 0; i < o.embeds; ++i) {
      const std::string q = question(static_cast<size_t>(i % n));
      auto t0 = clock_type::now();
      double c0 = thread_cpu_ms();
      auto h = cache.lookup(request(q));
      exact_cpu.push_back(thread_cpu_ms() - c0);
      exact.push_back(ms_since(t0));
      const std::string para = paraphrase(q);
      t0 = clock_type::now();
      c0 = thread_cpu_ms();
      h = cache.lookup(request(para));
      const double cpu = thread_cpu_ms() - c0, ms = ms_since(t0);
      if (h && !h->exact) semantic.push_back(ms), semantic_cpu.push_back(cpu), ++semantic_served;
      t0 = clock_type::now();
      c0 = thread_cpu_ms();
      h = cache.lookup(request("How many moons does planet number " + std::to_string(i) + " have?"));
      miss_cpu.push_back(thread_cpu_ms() - c0);
      miss.push_back(ms_since(t0));
    }
    const auto st = cache.stats();
    std::printf("\nsemantic cache lookup with %lld entries (ms, embedding included where needed)\n", static_cast<long long>(st.entries));
    std::printf("  %-34s %8s %8s %8s %8s\n", "path", "p50", "p99", "mean", "cpu p50");
    auto row = [](const char* label, const std::vector<double>& v, const std::vector<double>& cpu) {
      const auto p = summarize(v);
      std::printf("  %-34s %8.2f %8.2f %8.2f %8.2f\n", label, p.p50, p.p99, p.mean, summarize(cpu).p50);
    };
    row("exact hit (no embedding)", exact, exact_cpu);
    row("semantic hit (embed + index + read)", semantic, semantic_cpu);
    row("miss (embed + index)", miss, miss_cpu);
    std::printf("  semantic hits served for %d of %d light paraphrases at threshold %.2f\n", semantic_served, o.embeds, cfg.threshold);
    const double p99 = summarize(semantic).p99;
    std::printf("  target: a hit under 20 ms including the embedding: %s (p99 %.2f ms wall, cpu p50 %.2f ms; %s)\n",
                p99 < 20.0 ? "met" : "NOT met", p99, summarize(semantic_cpu).p50, load_note().c_str());
  }
  std::filesystem::remove_all(dir);
  return 0;
}

// 4. End to end: the pipeline with the chat model and the semantic cache; TTFT as the done
// event reports it (admission until the first token leaves the streamer).
int run_e2e(const bench_options& o) {
  using namespace troupe::actors;
  auto m = troupe::model::llama_model::load(o.model);
  if (!m) {
    std::fprintf(stderr, "troupe bench cache: %s\n", m.error().c_str());
    return 1;
  }
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-bench-cache-e2e-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  runtime rt;
  pipeline_config cfg;
  cfg.cache.policy = "semantic";
  cfg.cache.semantic.path = dir.string();
  cfg.cache.semantic.embedder_opts.model_dir = o.embedder_dir;
  cfg.cache.semantic.embedder_opts.weights = o.weights;
  cfg.cache.semantic.embedder_opts.n_threads = o.threads;
  cfg.cache.semantic.async_insert = false;  // the answer is stored before the next question
  troupe::model::backend_options bo;
  bo.kv_bytes = int64_t{64} << 20;
  auto p = pipeline::start(rt.system(), cfg, m.value(), bo);
  if (!p) {
    std::fprintf(stderr, "troupe bench cache: %s\n", p.error().c_str());
    return 1;
  }
  {
    client c(*p.value());
    auto ask = [&](const std::string& q) {
      request_spec s;
      s.messages.push_back({"user", q});
      s.max_tokens = o.e2e_max_tokens;
      return c.submit(std::move(s))->wait(std::chrono::minutes(2));
    };
    std::vector<double> miss, exact, semantic;
    int failed = 0, semantic_missed = 0;
    ask("Warm up: say hello.");
    for (int i = 0; i < o.e2e_questions; ++i) {
      const std::string q = question(static_cast<size_t>(i));
      auto first = ask(q);
      auto again = ask(q);
      auto para = ask(paraphrase(q));
      if (!first.ok() || !again.ok() || !para.ok()) {
        ++failed;
        continue;
      }
      if (!first.cached) miss.push_back(first.timings.ttft_ms);
      if (again.cached && again.tokens == first.tokens) exact.push_back(again.timings.ttft_ms);
      if (para.cached) semantic.push_back(para.timings.ttft_ms);
      else ++semantic_missed;
    }
    auto st = p.value()->get_cache_stats();
    std::printf("\nend to end through the pipeline (%s, %d questions, max_tokens %d; TTFT ms from admission)\n",
                o.model.c_str(), o.e2e_questions, o.e2e_max_tokens);
    std::printf("  %-34s %6s %8s %8s %8s\n", "request", "n", "p50", "p99", "mean");
    auto row = [](const char* label, const std::vector<double>& v) {
      const auto s = summarize(v);
      std::printf("  %-34s %6zu %8.2f %8.2f %8.2f\n", label, v.size(), s.p50, s.p99, s.mean);
    };
    row("miss (model runs)", miss);
    row("exact repeat (cache hit)", exact);
    row("light paraphrase (semantic hit)", semantic);
    if (!miss.empty() && !semantic.empty())
      std::printf("  miss / semantic hit TTFT (p50): %.1fx; %d paraphrases missed, %d questions failed; cache: %lld hits of %lld lookups\n",
                  summarize(miss).p50 / std::max(1e-3, summarize(semantic).p50), semantic_missed, failed,
                  st ? static_cast<long long>(st->hits) : -1LL, st ? static_cast<long long>(st->lookups) : -1LL);
    const double p99 = summarize(semantic).p99;
    std::printf("  target: a hit's TTFT under 20 ms including the embedding: %s (semantic p99 %.2f ms; %s)\n",
                !semantic.empty() && p99 < 20.0 ? "met" : "NOT met", p99, load_note().c_str());
  }
  p.value()->stop();
  std::filesystem::remove_all(dir);
  return 0;
}

troupe::app::register_bench reg("cache", "Semantic cache: embedding latency, index lookup at 10k/100k entries, hit path",
                                 [](CLI::App& sub) {
                                   auto o = std::make_shared<bench_options>();
                                   sub.add_option("--embedder-dir", o->embedder_dir, "Folder with the MiniLM files")->capture_default_str();
                                   sub.add_option("--threads", o->threads, "Embedder threads (0 = all cores)")->capture_default_str();
                                   sub.add_option("--weights", o->weights, "Embedder weight matrices: f32, f16, q8_0")->capture_default_str();
                                   sub.add_option("--embeds", o->embeds, "Texts embedded per length class")->capture_default_str();
                                   sub.add_option("--queries", o->queries, "Index queries per size")->capture_default_str();
                                   sub.add_option("--index-sizes", o->index_sizes, "Index sizes")->delimiter(',')->capture_default_str();
                                   sub.add_option("--cache-entries", o->cache_entries, "Questions stored before the lookup test")->capture_default_str();
                                   sub.add_option("--model", o->model, "Chat model for the end-to-end part")->capture_default_str();
                                   sub.add_option("--e2e-questions", o->e2e_questions, "End to end: questions (0: skip)")->capture_default_str();
                                   sub.add_option("--e2e-max-tokens", o->e2e_max_tokens, "End to end: max_tokens")->capture_default_str();
                                   return [o]() {
                                     const int rc = run_bench_cache(*o);
                                     return rc != 0 || o->e2e_questions <= 0 ? rc : run_e2e(*o);
                                   };
                                 });

}  // namespace

}  // namespace troupe::bench

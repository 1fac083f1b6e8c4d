// `troupe bench spec`: what speculative decoding buys, in the serving pipeline in process (no
// network). For each prompt set — (a) copy-heavy: rewrite or quote a given passage, edit a code
// snippet, fill a JSON record from given text; (b) ordinary chat — at batch 1 (the prompts one
// after another) and batch 16 (16 requests at once, the prompts cycled), each method ("off" and
// every registered proposer) runs the same greedy requests on a fresh pipeline (so a proposer
// that learns across requests, like `suffix`, starts empty in every cell). Printed per cell:
// decode tokens/s (each request's own, first token to done, mean over the requests), aggregate
// tokens/s, tokens proposed and accepted, and the decode rate against "off". The methods take
// turns for --repeat rounds and each keeps its fastest. Greedy outputs must be identical to
// "off" token for token: a run whose texts differ is flagged (and the exit status is 1).
// `draft` needs a second model with the same vocabulary: only one exists here, so by default it
// is the model itself (labelled "draft=self": its guesses are near 100% right but each costs a
// full model forward, so it shows the mechanism's overhead, not what a small draft buys);
// --draft-model names another.
// Under each prompt set's batch-1 rows, the lookup bound (actors/scheduler/speculative/
// lookup_bound.hpp): of off's own greedy outputs, how many tokens any prompt-lookup proposer
// could have had accepted at best, and so how many tokens a step could yield: a speedup target
// above that is out of reach of ngram and suffix on this model, whatever their tuning.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "actors/client.hpp"
#include "actors/runtime.hpp"
#include "actors/scheduler/speculative/lookup_bound.hpp"
#include "actors/scheduler/speculative/proposer.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/text_codec.hpp"
#include "app/bench_command.hpp"
#include "bench/cpu_name.hpp"
#include "model/llama_model.hpp"

namespace troupe::bench {

namespace {

using namespace troupe::actors;
using clock_type = std::chrono::steady_clock;

struct spec_options {
  std::string model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int threads = 2;
  int batch = 16;
  int tokens = 128;
  std::vector<std::string> methods;  // "off" and these; empty: "off" and every registered proposer
  int repeat = 5;
  double min_acceptance = speculative_config{}.min_acceptance;
  std::string draft_model;  // draft: empty = the model itself
  int k = speculative_config{}.k;  // most tokens proposed in one step
  // The order `troupe serve` runs with its shipped config (config/troupe.toml: model.matmul =
  // "fast"): speculation's gain depends on what a verified position costs, so measure the served
  // engine, not the bit-exact default of the library.
  std::string matmul = "fast";
};


const std::vector<std::string>& copy_prompts() {
  static const std::vector<std::string> p = {
      "Copy the following passage exactly, word for word.\n\n"
      "The river runs past the old mill, where the water turns the wheel day and night. In spring "
      "the snow melts in the hills and the river rises, and the miller opens the sluice so the wheel "
      "does not break. In summer the river is low and slow, and children swim by the stone bridge. "
      "In autumn the leaves fall into the water and float down to the town, where the market is held "
      "every Saturday. In winter the river freezes at the edges, and the mill is quiet until spring.",
      "Here is a Python function. Rename the variable `total` to `sum_so_far` and return the full "
      "edited code.\n\n```python\ndef add_all(values):\n    total = 0\n    for v in values:\n"
      "        if v is None:\n            continue\n        total = total + v\n    return total\n\n\n"
      "def average(values):\n    if not values:\n        return 0.0\n"
      "    return add_all(values) / len(values)\n\n\ndef report(values):\n"
      "    print(\"total:\", add_all(values))\n    print(\"average:\", average(values))\n```",
      "Fill this JSON record from the text. Text: Maria Lopez is 34 years old, lives in Madrid, "
      "works as a nurse at the Hospital General, and her email is maria.lopez@example.com. Her phone "
      "number is +34 600 123 456 and she speaks Spanish, English and French. Record: "
      "{\"name\": \"\", \"age\": 0, \"city\": \"\", \"job\": \"\", \"employer\": \"\", "
      "\"email\": \"\", \"phone\": \"\", \"languages\": []}. Answer with the filled JSON record only.",
  };
  return p;
}

const std::vector<std::string>& chat_prompts() {
  static const std::vector<std::string> p = {
      "What are three good habits for staying healthy?",
      "Tell me a short story about a cat who learns to fly.",
      "Why is the sky blue? Explain it simply.",
      "Give me some ideas for a weekend trip with friends.",
  };
  return p;
}

struct cell {
  double decode_rate = 0;  // mean over the requests of their own tokens/s, first token to done
  double agg_rate = 0;     // all tokens / wall time
  int64_t tokens = 0, proposed = 0, accepted = 0;
  int errors = 0;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;  // each request's output tokens
};

// One request's figures, from its stream.
struct one {
  std::string text;
  std::vector<int32_t> ids;
  int32_t tokens = 0, proposed = 0, accepted = 0;
  double rate = 0;
  bool error = false;
};

one read(stream& s) {
  one r;
  clock_type::time_point first{};
  bool seen = false;
  while (auto e = s.next(std::chrono::minutes(10))) {
    if (auto* t = std::get_if<token_event>(&*e)) {
      if (!seen) first = clock_type::now(), seen = true;
      r.text += t->text;
      r.ids.push_back(t->token);
    } else if (auto* d = std::get_if<done_event>(&*e)) {
      const double span = std::chrono::duration<double>(clock_type::now() - first).count();
      r.text += d->text;
      r.tokens = d->usage.completion_tokens;
      r.proposed = d->usage.speculative_proposed;
      r.accepted = d->usage.speculative_accepted;
      if (seen && r.tokens > 1 && span > 0) r.rate = (r.tokens - 1) / span;
      return r;
    } else {
      std::fprintf(stderr, "  request failed: %s\n", std::get<error_event>(*e).message.c_str());
      r.error = true;
      return r;
    }
  }
  r.error = true;
  return r;
}

chat_message user_message(const std::string& prompt) {
  chat_message m;
  m.role = "user";
  m.content = prompt;
  return m;
}

request_spec make_request(const std::string& prompt, int tokens) {
  request_spec s;
  s.messages = {user_message(prompt)};
  s.max_tokens = tokens;
  s.cache = cache::cache_choice::refused;
  return s;
}

cell drive(pipeline& p, const std::vector<std::string>& prompts, int batch, int tokens) {
  cell c;
  client cl(p);
  std::vector<one> res;
  const auto t0 = clock_type::now();
  if (batch == 1) {
    for (const auto& pr : prompts) res.push_back(read(*cl.submit(make_request(pr, tokens))));
  } else {
    std::vector<std::unique_ptr<stream>> streams;
    for (int i = 0; i < batch; ++i)
      streams.push_back(cl.submit(make_request(prompts[static_cast<size_t>(i) % prompts.size()], tokens)));
    res.resize(static_cast<size_t>(batch));
    std::vector<std::thread> readers;
    for (int i = 0; i < batch; ++i)
      readers.emplace_back([&, i] { res[static_cast<size_t>(i)] = read(*streams[static_cast<size_t>(i)]); });
    for (auto& r : readers) r.join();
  }
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  for (const auto& r : res) {
    c.tokens += r.tokens;
    c.proposed += r.proposed;
    c.accepted += r.accepted;
    c.errors += r.error ? 1 : 0;
    c.decode_rate += r.rate;
    c.texts.push_back(r.text);
    c.ids.push_back(r.ids);
  }
  c.decode_rate /= static_cast<double>(std::max<size_t>(1, res.size()));
  c.agg_rate = wall > 0 ? static_cast<double>(c.tokens) / wall : 0;
  return c;
}

// The lookup bound of off's batch-1 outputs (their prompts as the pipeline encodes them), at the
// run's k and at 2k, against what each method kept in its fastest round.
void print_lookup_bound(const text_codec& codec, const std::vector<std::string>& prompts,
                        const std::vector<std::vector<int32_t>>& off_ids, const speculative_config& c,
                        const std::vector<std::string>& methods, const std::vector<cell>& best) {
  for (const int32_t k : {c.k, 2 * c.k}) {
    lookup_bound_result all;
    for (size_t i = 0; i < prompts.size() && i < off_ids.size(); ++i) {
      auto prompt = codec.encode_chat({user_message(prompts[i])});
      if (!prompt) return (void)std::printf("  lookup bound: %s\n", prompt.error().c_str());
      const auto b = lookup_bound(*prompt, off_ids[i], c.ngram_min, k);
      all.tokens += b.tokens;
      all.steps += b.steps;
    }
    std::printf("  lookup bound, k=%d, matches of >= %d tokens: at most %lld of %lld tokens from guesses, %.2f tokens a step\n",
                k, c.ngram_min, static_cast<long long>(all.guessed()), static_cast<long long>(all.tokens),
                all.tokens_per_step());
  }
  std::printf("  kept:");
  for (size_t mi = 1; mi < methods.size(); ++mi)
    std::printf(" %s %lld of %lld%s", methods[mi].c_str(), static_cast<long long>(best[mi].accepted),
                static_cast<long long>(best[mi].tokens), mi + 1 < methods.size() ? "," : "");
  std::printf("\n");
}

int run_spec_bench(const spec_options& o) {
  auto m = model::llama_model::load(o.model);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().c_str());
    return 1;
  }
  auto codec = make_gguf_codec(m.value()->file());
  if (!codec) {
    std::fprintf(stderr, "error: %s\n", codec.error().c_str());
    return 1;
  }
  const auto order = model::parse_matmul_order(o.matmul);
  if (!order) {
    std::fprintf(stderr, "error: --matmul must be fast or llama.cpp, not '%s'\n", o.matmul.c_str());
    return 1;
  }
  auto methods = o.methods;
  if (methods.empty())
    for (auto& n : proposer_registry().names()) methods.push_back(n);
  methods.erase(std::remove(methods.begin(), methods.end(), "off"), methods.end());
  methods.insert(methods.begin(), "off");  // the baseline, always first
  speculative_config defaults;
  defaults.k = o.k;
  defaults.min_acceptance = o.min_acceptance;
  std::printf("troupe bench spec: %s, CPU %s, %d backend threads; greedy, up to %d tokens per request, "
              "best of %d rounds; matmul %s; k=%d, ngram %d..%d, max_batch=%d, min_acceptance=%g\n",
              o.model.c_str(), cpu_name().c_str(), o.threads, o.tokens, o.repeat, o.matmul.c_str(), defaults.k,
              defaults.ngram_min, defaults.ngram_max, defaults.max_batch, defaults.min_acceptance);
  runtime rt;
  struct set {
    const char* name;
    const std::vector<std::string>* prompts;
  };
  const set sets[] = {{"copy", &copy_prompts()}, {"chat", &chat_prompts()}};
  std::vector<int> batches = {1};
  if (o.batch != 1) batches.push_back(o.batch);
  int failures = 0;
  std::printf("\n  decode tok/s, agg tok/s, proposed, accepted: the method's fastest round; vs off: the median over\n"
              "  the rounds of its rate over off's rate in the same round, and the lowest and highest of them\n");
  std::printf("\n  %-5s %5s %-10s %7s %12s %9s %9s %9s %8s %9s %15s\n", "set", "batch", "method", "tokens",
              "decode tok/s", "agg tok/s", "proposed", "accepted", "accept%", "vs off", "(range)");
  for (const auto& st : sets)
    for (int b : batches) {
      // The methods take turns, `repeat` rounds; each keeps its fastest round: on a shared
      // machine other load only ever slows a run down.
      std::vector<cell> best(methods.size());
      std::vector<std::vector<double>> ratios(methods.size());  // per round: the rate over off's in that round
      std::vector<std::string> off_texts;
      std::vector<std::vector<int32_t>> off_ids;
      double last_off_rate = 0;
      for (int round = 0; round < o.repeat; ++round)
        for (size_t mi = 0; mi < methods.size(); ++mi) {
          pipeline_config cfg;
          cfg.scheduler.max_num_seqs = std::max(16, o.batch);
          cfg.scheduler.speculative.method = methods[mi];
          cfg.scheduler.speculative.k = o.k;
          cfg.scheduler.speculative.min_acceptance = o.min_acceptance;
          cfg.scheduler.speculative.draft_model = o.draft_model.empty() ? o.model : o.draft_model;
          cfg.scheduler.speculative.draft_threads = o.threads;
          cfg.cache.enabled = false;
          cfg.admission.max_pending = 100000;
          cfg.streamer.buffer_tokens = 0;
          model::backend_options bo;
          bo.n_threads = o.threads;
          bo.matmul = *order;
          bo.kv_bytes = int64_t{256} << 20;
          auto p = pipeline::start(rt.system(), cfg, m.value(), bo);
          if (!p) {
            std::fprintf(stderr, "error: %s\n", p.error().c_str());
            return 1;
          }
          drive(**p, {"Hello."}, 1, 4);  // warm-up: the threads started, the pages touched
          auto c = drive(**p, *st.prompts, b, o.tokens);
          (*p)->stop();
          if (methods[mi] == "off" && off_texts.empty()) off_texts = c.texts, off_ids = c.ids;
          if (c.errors || (!off_texts.empty() && c.texts != off_texts)) {
            ++failures;
            std::printf("  %s batch %d %s: %s\n", st.name, b, methods[mi].c_str(),
                        c.errors ? "errors!" : "output differs from off!");
          }
          // Paired with off's run of the same round, minutes apart at most: the load of the
          // moment cancels out of the ratio better than out of two bests from different rounds.
          const double off_now = mi == 0 ? c.decode_rate : last_off_rate;
          if (mi == 0) last_off_rate = c.decode_rate;
          if (off_now > 0) ratios[mi].push_back(c.decode_rate / off_now);
          if (round == 0 || c.decode_rate > best[mi].decode_rate) best[mi] = std::move(c);
        }
      for (size_t mi = 0; mi < methods.size(); ++mi) {
        const auto& c = best[mi];
        const std::string label =
            methods[mi] != "draft" ? methods[mi] : o.draft_model.empty() ? "draft=self" : "draft";
        auto r = ratios[mi];
        std::sort(r.begin(), r.end());
        const double median = r.empty() ? 0.0 : r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2;
        std::printf("  %-5s %5d %-10s %7lld %12.1f %9.1f %9lld %9lld %7.1f%% %8.3fx  (%.3f-%.3f)\n", st.name, b,
                    label.c_str(), static_cast<long long>(c.tokens), c.decode_rate, c.agg_rate,
                    static_cast<long long>(c.proposed), static_cast<long long>(c.accepted),
                    c.proposed > 0 ? 100.0 * c.accepted / c.proposed : 0.0, median, r.empty() ? 0.0 : r.front(),
                    r.empty() ? 0.0 : r.back());
      }
      if (b == 1) print_lookup_bound(**codec, *st.prompts, off_ids, defaults, methods, best);
      std::fflush(stdout);
    }
  return failures == 0 ? 0 : 1;
}

app::register_bench reg("spec", "Speculative decoding: each proposer vs off, copy-heavy and chat prompts, batch 1 and 16",
                        [](CLI::App& sub) {
                          auto o = std::make_shared<spec_options>();
                          sub.add_option("--model,-m", o->model, "GGUF model file")->capture_default_str();
                          sub.add_option("--threads", o->threads, "Backend threads")->capture_default_str();
                          sub.add_option("--batch", o->batch, "Requests at once in the batched runs")->capture_default_str();
                          sub.add_option("--tokens", o->tokens, "Most tokens per request")->capture_default_str();
                          sub.add_option("--matmul", o->matmul, "Quantized matmul order: fast (as served) or llama.cpp")
                              ->capture_default_str();
                          sub.add_option("--k", o->k, "Most tokens proposed in one step (speculative.k)")
                              ->check(CLI::Range(1, 32))
                              ->capture_default_str();
                          sub.add_option("--min-acceptance", o->min_acceptance,
                                         "Rolling acceptance under which a request stops guessing for a while (speculative.min_acceptance)")
                              ->check(CLI::Range(0.0, 1.0))
                              ->capture_default_str();
                          sub.add_option("--method", o->methods, "Methods to compare with off (default: every proposer)");
                          sub.add_option("--draft-model", o->draft_model,
                                         "draft: the draft model (default: the model itself, labelled draft=self)");
                          sub.add_option("--repeat", o->repeat, "Rounds per cell: each method runs once a round; its fastest round and its median ratio to off count")
                              ->check(CLI::Range(1, 100))
                              ->capture_default_str();
                          return [o]() { return run_spec_bench(*o); };
                        });

}  // namespace

}  // namespace troupe::bench

// `troupe bench grammar`: what the structured-output engine costs per token, against a decode
// step of the real model. For each constraint (json_object, a nested JSON Schema, a regex, a GBNF
// grammar): compile time, microseconds per allowed_tokens with a cold mask cache (a freshly
// compiled constraint: every state is computed by the trie walk) and warm (the same states
// again, served by the cache), and per accept, along the tokens of a sample document; then the
// measured time of a batch-16 decode step of the real model in the same run, and the masks'
// share of it (one mask per sequence per step, 16 per step when one thread does them all).
// Beside the cold figures, one plain walk of the vocabulary per state (no caches at all): what a
// new state would cost without the cut-state cache (structured/constraint.cpp), in the same run.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "app/bench_command.hpp"
#include "bench/cpu_name.hpp"
#include "model/backend.hpp"
#include "model/batch_generator.hpp"
#include "model/loaded_model.hpp"
#include "structured/constraint.hpp"

namespace troupe::bench {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace troupe::structured;

struct grammar_bench_options {
  std::string model = model::default_model_path();
  int repeats = 5;  // passes over each sample document
  int threads = 0;  // decode step: backend threads (0: all cores)
};


double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

struct summary {
  double mean = 0, p50 = 0, p99 = 0;
};
summary summarize(std::vector<double> v) {
  summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  return s;
}

struct bench_case {
  const char* name;
  constraint_spec spec;
  std::string sample;  // a document the constraint accepts, walked token by token
};

std::string int_list(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(i * 37 % 100);
  return s;
}

std::vector<bench_case> cases() {
  const std::string nested = R"({"$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string"},
    "price": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
    "required": ["name", "price"]}}, "type": "object", "properties": {"order_id": {"type": "string", "format": "uuid"},
    "customer": {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string", "format": "email"}},
    "required": ["name"]}, "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}, "status": {"enum": ["open", "paid", "shipped"]}},
    "required": ["order_id", "customer", "items", "status"]})";
  return {
      {"json_object", {kind::json_object, ""},
       R"({"title": "The Old Man and the Sea", "author": {"name": "Ernest Hemingway", "born": 1899}, "pages": 127, "tags": ["novel", "fishing", "classic"], "in_print": true, "summary": "An aging Cuban fisherman struggles with a giant marlin far out in the Gulf Stream."})"},
      {"nested_schema", {kind::json_schema, nested},
       R"({"order_id": "3f2b8c1e-9a4d-4e7b-8c2f-1a2b3c4d5e6f", "customer": {"name": "Ada Lovelace", "email": "ada@example.com"}, "items": [{"name": "Analytical engine manual", "price": 42.5, "tags": ["book", "history"]}, {"name": "Punched cards", "price": 3.25}], "status": "paid"})"},
      {"regex", {kind::regex, R"(([A-Z][a-z]+ ){1,4}\d{1,3} (apples|pears|plums)(, and ([a-z]+ )+[a-z]+)?\.)"},
       "Alice Bob Carol 123 plums, and some more fruit from the market stall.", },
      {"gbnf", {kind::grammar, R"(root ::= line+
line ::= "- " item (", " item)* "\n"
item ::= [a-zA-Z]+ (" " [a-zA-Z0-9]+){0,3}
)"},
       "- milk, eggs, bread\n- apples and pears, green tea, rice 2 kg\n- soap, toothpaste\n"},
      // bench structured's schema: every item a new state (its position in the array).
      {"int_array_42", {kind::json_schema, R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":99},"minItems":42,"maxItems":42})"},
       "[" + int_list(42) + "]"},
  };
}

// The mean wall time of one decode step with 16 sequences decoding together.
double batch16_step_ms(model::backend& be) {
  model::batch_generator gen(be, 2048);
  std::vector<model::generation_request> reqs;
  for (int i = 0; i < 16; ++i) {
    model::generation_request r;
    for (int k = 0; k < 64; ++k) r.prompt.push_back(100 + (i * 7919 + k * 104729) % 30000);
    r.max_tokens = 64;
    reqs.push_back(r);
  }
  model::generation_stats st;
  gen.run(reqs, &st);
  return st.decode_steps > 0 ? st.decode_seconds * 1e3 / static_cast<double>(st.decode_steps) : 0.0;
}

int run_grammar_bench(const grammar_bench_options& o) {
  std::printf("troupe bench grammar\nCPU: %s\n", cpu_name().c_str());
  auto lm = model::loaded_model::load(o.model);
  if (!lm.ok()) {
    std::fprintf(stderr, "error: %s\n", lm.error().c_str());
    return 1;
  }
  const auto& tok = lm.value()->vocab;
  auto t0 = clock_type::now();
  auto vocab = std::make_shared<const token_vocabulary>(tok);
  std::printf("model: %s (%d tokens); vocabulary trie built in %.1f ms\n\n", o.model.c_str(), vocab->n_vocab(),
              us_since(t0) / 1e3);

  std::printf("%-14s %8s %6s | %26s | %26s | %26s | %9s\n", "constraint", "compile", "tokens", "mask cold us mean/p50/p99",
              "plain walk us mean/p50/p99", "mask warm us mean/p50/p99", "accept us");
  std::vector<double> all_cold, all_warm, all_plain;
  for (const auto& c : cases()) {
    const auto tokens = tok.encode(c.sample);
    std::vector<double> compile_ms, cold, warm, accept, plain;
    std::vector<uint64_t> mask;
    size_t walked = 0;
    for (int r = 0; r < o.repeats; ++r) {
      t0 = clock_type::now();
      auto compiled = compile(c.spec, vocab);
      compile_ms.push_back(us_since(t0) / 1e3);
      if (!compiled.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", c.name, compiled.error().c_str());
        return 1;
      }
      // Cold: the first visit of each state on this freshly compiled constraint; warm: a second
      // matcher walking the same states.
      for (int pass = 0; pass < 2; ++pass) {
        matcher m(compiled.value());
        walked = 0;
        for (int32_t t : tokens) {
          if (pass == 0) {
            t0 = clock_type::now();
            m.allowed_tokens_reference(mask);
            plain.push_back(us_since(t0));
          }
          t0 = clock_type::now();
          m.allowed_tokens(mask);
          (pass == 0 ? cold : warm).push_back(us_since(t0));
          t0 = clock_type::now();
          const bool ok = m.accept(t);
          if (pass == 0) accept.push_back(us_since(t0));
          if (!ok) break;
          ++walked;
        }
      }
    }
    if (walked != tokens.size())
      std::fprintf(stderr, "warning: %s: the sample was refused at token %zu of %zu\n", c.name, walked, tokens.size());
    const auto sc = summarize(cold), sw = summarize(warm), sa = summarize(accept), sm = summarize(compile_ms),
               sp = summarize(plain);
    std::printf("%-14s %6.2fms %6zu | %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %9.2f\n", c.name, sm.p50,
                walked, sc.mean, sc.p50, sc.p99, sp.mean, sp.p50, sp.p99, sw.mean, sw.p50, sw.p99, sa.mean);
    all_plain.insert(all_plain.end(), plain.begin(), plain.end());
    all_cold.insert(all_cold.end(), cold.begin(), cold.end());
    all_warm.insert(all_warm.end(), warm.begin(), warm.end());
  }

  model::backend_options bo;
  bo.n_threads = o.threads;
  bo.matmul = model::matmul_order::fast;  // what `troupe serve` runs (config/troupe.toml)
  auto be = model::make_backend("cpu", lm.value()->weights, bo);
  if (!be.ok()) {
    std::fprintf(stderr, "error: %s\n", be.error().c_str());
    return 1;
  }
  batch16_step_ms(*be.value());  // warm-up
  const double step_ms = batch16_step_ms(*be.value());
  const auto c = summarize(all_cold), w = summarize(all_warm), p = summarize(all_plain);
  const unsigned threads = o.threads > 0 ? static_cast<unsigned>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
  std::printf("\nbatch-16 decode step of the real model (fast order, as served): %.2f ms (mean; %u threads)\n", step_ms,
              threads);
  std::printf("new states: cached and cut walks %.1f us mean against a plain walk's %.1f us (%.2fx)\n", c.mean, p.mean,
              c.mean > 0 ? p.mean / c.mean : 0.0);
  std::printf("one mask per step, all constraints: cold mean %.1f us = %.2f%% of a step, warm mean %.1f us = %.3f%%\n", c.mean,
              100.0 * c.mean / 1e3 / step_ms, w.mean, 100.0 * w.mean / 1e3 / step_ms);
  std::printf("16 masks per step on one thread: cold %.2f%%, warm %.2f%% of a step (target: under 10%%: %s)\n",
              1600.0 * c.mean / 1e3 / step_ms, 1600.0 * w.mean / 1e3 / step_ms,
              1600.0 * c.mean / 1e3 / step_ms < 10.0 ? "met cold" : (1600.0 * w.mean / 1e3 / step_ms < 10.0 ? "met warm only" : "NOT met"));
  // The executor samples costly rows (constrained ones are) on the backend's threads.
  std::printf("16 masks per step spread over the %u backend threads, as the executor does: cold %.2f%%, warm %.3f%% of a step\n",
              threads, 1600.0 * c.mean / 1e3 / step_ms / threads, 1600.0 * w.mean / 1e3 / step_ms / threads);
  return 0;
}

app::register_bench reg("grammar", "Structured-output engine: compile, mask (cold/warm) and accept costs vs a decode step",
                        [](CLI::App& sub) {
                          auto o = std::make_shared<grammar_bench_options>();
                          sub.add_option("--model", o->model, "Model file (vocabulary and the decode step)")->capture_default_str();
                          sub.add_option("--repeats", o->repeats, "Passes over each sample document")->capture_default_str();
                          sub.add_option("--threads", o->threads, "Decode step: backend threads (0 = all cores)")->capture_default_str();
                          return [o]() { return run_grammar_bench(*o); };
                        });

}  // namespace

}  // namespace troupe::bench

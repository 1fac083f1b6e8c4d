#include "bench/quality_bench.hpp"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "model/backend.hpp"
#include "model/matmul.hpp"
#include "model/matmul_amx.hpp"
#include "model/paged_attention.hpp"

namespace troupe::bench {

namespace {

struct path_config {
  const char* name;
  model::matmul_order order;
  bool kv_f32, kv_q8;
};

}  // namespace

quality_figures measure_quality(const model::loaded_model& lm, const std::string& path, int threads, int32_t n_ctx,
                                int32_t chunks) {
  quality_figures q;
  q.text = path;
  q.n_ctx = n_ctx;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    q.error = "cannot read the eval text '" + path + "'";
    return q;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  auto toks = lm.encode_prompt(ss.str());
  if (!toks) {
    q.error = "eval text: " + toks.error();
    return q;
  }
  model::eval_options eo;
  eo.n_ctx = n_ctx;
  eo.max_chunks = chunks;
  auto windows = model::eval_windows(*toks, eo);
  if (!windows) {
    q.error = "eval text: " + windows.error();
    return q;
  }
  q.chunks = static_cast<int32_t>(windows->size());
  const auto& hp = lm.weights->params();
  auto run = [&](const path_config& c, std::vector<model::eval_chunk>& out) -> status {
    model::backend_options bo;
    bo.n_threads = threads;
    bo.matmul = c.order;
    bo.kv_f32 = c.kv_f32;
    bo.kv_q8 = c.kv_q8;
    bo.kv_bytes = int64_t{n_ctx + 32} * hp.n_kv_dim() * hp.n_layer * 8;  // f32 K and V, with room
    auto be = model::make_backend("cpu", lm.weights, bo);
    if (!be) return make_error(std::string(c.name) + ": " + be.error());
    std::fprintf(stderr, "quality: scoring %d windows of %d tokens, %s ...\n", q.chunks, n_ctx, c.name);
    return model::evaluate(*be.value(), *windows, [&](const model::eval_chunk& ch) {
      out.push_back(ch);
      return status{};
    });
  };
  const path_config reference{"llama.cpp order, f32 K/V", model::matmul_order::llama_cpp, true, false};
  // The first row is llama-perplexity's own yardstick: the same order with fp16 K/V, the spread
  // every fp16 run carries. The fast order multiplies prompts with AMX tiles where the CPU has
  // them (matmul_amx.hpp), so its rows are the AMX path's there.
  const path_config paths[] = {{"llama.cpp order, fp16 K/V", model::matmul_order::llama_cpp, false, false},
                               {"fast order, fp16 K/V", model::matmul_order::fast, false, false},
                               {"fast order, q8 K/V", model::matmul_order::fast, false, true}};
  std::vector<model::eval_chunk> ref;
  if (auto st = run(reference, ref); !st) {
    q.error = st.error();
    return q;
  }
  model::ppl_accumulator ppl;
  for (const auto& c : ref) ppl.add(c);
  q.ppl_reference = ppl.ppl();
  q.scored = ppl.count();
  for (const auto& p : paths) {
    // A path this CPU cannot run is a note, not a failed table (the rows would be another path's).
    if (p.order == model::matmul_order::fast && !model::fast_order_available()) {
      q.notes.push_back(std::string("no row for ") + p.name + ": this CPU has no fast kernels (matmul path " +
                        model::matmul_isa() + "; they need AVX2 or AVX-512 VNNI)");
      continue;
    }
    if (p.kv_q8 && !model::kv_q8_supported(hp.head_dim)) {
      q.notes.push_back(std::string("no row for ") + p.name + ": q8 K/V needs AVX2 or AVX-512 and a head size of 64 or 128 "
                        "(matmul path " + model::matmul_isa() + ", head size " + std::to_string(hp.head_dim) + ")");
      continue;
    }
    std::vector<model::eval_chunk> rows;
    if (auto st = run(p, rows); !st) {
      q.error = st.error();
      return q;
    }
    model::kl_accumulator acc;
    for (size_t i = 0; i < ref.size() && i < rows.size(); ++i)
      if (auto st = acc.add(ref[i], rows[i]); !st) {
        q.error = std::string(p.name) + ": " + st.error();
        return q;
      }
    q.rows.emplace_back(p.name, acc.summary());
  }
  q.notes.push_back(model::amx_support().available
                        ? "the fast order's rows are the AMX tile path's (prompt chunks of " +
                              std::to_string(model::detail::k_amx_min_tokens) + " or more rows multiply with tiles here)"
                        : "no AMX row: " + model::amx_path_line());
  q.notes.push_back(
      "speculative decoding: no row, it changes no distribution (greedy outputs token for token identical to off; "
      "sampled, a chi-square test of the first tokens against plain sampling: tests/actors/scheduler/)");
  return q;
}

void print_quality(const quality_figures& q) {
  if (!q.error.empty()) {
    std::printf("\nquality: not measured: %s\n", q.error.c_str());
    return;
  }
  std::printf("\nquality (model/eval.cpp, as `troupe eval`): %s, %d windows of %d tokens, %lld tokens scored; reference "
              "llama.cpp order with f32 K/V, perplexity %.4f\n",
              q.text.c_str(), q.chunks, q.n_ctx, static_cast<long long>(q.scored), q.ppl_reference);
  std::printf("| path | mean KL | p99 KL | max KL | top-1 agreement | perplexity | ratio |\n|---|---|---|---|---|---|---|\n");
  for (const auto& [name, s] : q.rows)
    std::printf("| %s | %.6f | %.6f | %.6f | %.4f | %.4f | %.6f |\n", name.c_str(), s.mean_kl, s.p99_kl, s.max_kl,
                s.top1_agreement, s.ppl_test, s.ppl_ratio());
  if (!q.rows.empty()) {
    const auto& spread = q.rows.front().second;  // fp16 K/V in the exact order: the yardstick
    for (size_t i = 1; i < q.rows.size(); ++i)
      std::printf("%s: mean KL %.2fx, p99 KL %.2fx the fp16 K/V spread (the test's bound: 4x)\n", q.rows[i].first.c_str(),
                  spread.mean_kl > 0 ? q.rows[i].second.mean_kl / spread.mean_kl : 0.0,
                  spread.p99_kl > 0 ? q.rows[i].second.p99_kl / spread.p99_kl : 0.0);
  }
  for (const auto& n : q.notes) std::printf("note: %s\n", n.c_str());
}

void write_quality(net::json_writer& w, const quality_figures& q) {
  w.key("quality");
  if (!q.error.empty()) {
    w.begin_object().field("error", q.error).end_object();
    return;
  }
  w.begin_object();
  w.field("text", q.text).field("n_ctx", int64_t{q.n_ctx}).field("windows", int64_t{q.chunks});
  w.field("tokens_scored", q.scored).field("ppl_reference", q.ppl_reference);
  w.key("paths").begin_array();
  for (const auto& [name, s] : q.rows) {
    w.begin_object();
    w.field("name", name).field("mean_kl", s.mean_kl).field("p99_kl", s.p99_kl).field("max_kl", s.max_kl);
    w.field("top1_agreement", s.top1_agreement).field("ppl", s.ppl_test).field("ppl_ratio", s.ppl_ratio());
    w.end_object();
  }
  w.end_array();
  w.key("notes").begin_array();
  for (const auto& n : q.notes) w.value(n);
  w.end_array();
  w.end_object();
}

}  // namespace troupe::bench

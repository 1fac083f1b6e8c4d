// `troupe eval`: the quality gate of the fast paths, llama.cpp's `llama-perplexity` way
// (model/eval.hpp). Perplexity of a text file over windows of --ctx tokens; --save-logits keeps a
// reference run's log-probabilities (run it in the bit-exact order: --matmul llama.cpp, --kv f32
// or fp16), --kl-base compares this run's against them: mean / p99 KL divergence, top-1 agreement
// and the perplexity ratio. Speculative decoding needs no row here: it does not change logits. Its
// verification step feeds several decoded positions at once, and a position's arithmetic depends
// on what it is (prompt or decoded), never on how the steps were cut (backend.hpp, n_prompt), so
// each verified position's logits are the plain decode's bit for bit
// (tests/actors/scheduler/scheduler_state_real_model_test.cpp: the same greedy tokens with it).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "app/command.hpp"
#include "app/file_text.hpp"
#include "model/cpu_backend.hpp"
#include "model/eval.hpp"
#include "model/loaded_model.hpp"

namespace {

using namespace troupe::model;

struct eval_cli {
  std::string model = default_model_path();
  std::string file;
  int32_t ctx = 512;
  int32_t chunks = 0;
  int threads = 0;
  std::string matmul = matmul_order_name(backend_options{}.matmul);
  std::string kv = "f16";
  std::string save_logits;
  std::string kl_base;
};

int fail(const std::string& m) {
  std::fprintf(stderr, "troupe eval: %s\n", m.c_str());
  return 1;
}

int run_eval(const eval_cli& o) {
  if (!o.save_logits.empty() && !o.kl_base.empty())
    return fail("give --save-logits (write a reference) or --kl-base (compare with one), not both");
  backend_options bo;
  bo.n_threads = o.threads;
  if (auto order = parse_matmul_order(o.matmul)) bo.matmul = *order;
  else return fail("--matmul must be fast or llama.cpp, not '" + o.matmul + "'");
  if (o.kv == "f32") bo.kv_f32 = true;
  else if (o.kv == "q8") bo.kv_q8 = true;
  else if (o.kv != "f16") return fail("--kv must be f16, f32 or q8, not '" + o.kv + "'");

  auto text = troupe::app::read_file_text(o.file);
  if (!text) return fail(text.error());
  std::fprintf(stderr, "loading %s ...\n", o.model.c_str());
  auto lm = loaded_model::load(o.model);
  if (!lm) return fail(lm.error());
  auto& m = *lm.value();
  auto toks = m.encode_prompt(*text);
  if (!toks) return fail("'" + o.file + "': " + toks.error());
  const auto& hp = m.weights->params();
  if (o.ctx > hp.n_ctx_train)
    return fail("--ctx " + std::to_string(o.ctx) + " exceeds the model context of " + std::to_string(hp.n_ctx_train));
  eval_options eo;
  eo.n_ctx = o.ctx;
  eo.max_chunks = o.chunks;
  eo.bos = m.vocab.add_bos_default() ? m.vocab.bos() : -1;
  auto windows = eval_windows(*toks, eo);
  if (!windows) return fail(windows.error());

  bo.kv_bytes = (int64_t{o.ctx} + 64) * hp.n_kv_dim() * hp.n_layer * 8 + (1 << 20);
  auto be = make_backend("cpu", m.weights, bo);
  if (!be) return fail(be.error());

  std::optional<logits_writer> writer;
  std::optional<logits_reader> reader;
  if (!o.save_logits.empty()) {
    auto w = logits_writer::open(o.save_logits, hp.n_vocab, *windows);
    if (!w) return fail("--save-logits: " + w.error());
    writer.emplace(std::move(w.value()));
  }
  if (!o.kl_base.empty()) {
    auto r = logits_reader::open(o.kl_base, hp.n_vocab, *windows);
    if (!r) return fail("--kl-base: " + r.error());
    reader.emplace(std::move(r.value()));
  }
  // The order that runs, which is not the one asked for on a CPU without the fast kernels or
  // under TROUPE_MATMUL_ORDER: the figures must name what they measured.
  const auto* cpu = dynamic_cast<const cpu_backend*>(be.value().get());
  const char* order = cpu ? matmul_order_name(cpu->order()) : o.matmul.c_str();
  if (order != o.matmul) std::fprintf(stderr, "note: --matmul %s asked for, the %s order runs\n", o.matmul.c_str(), order);
  std::fprintf(stderr, "%zu tokens, %zu windows of %d (scoring the second half of each); matmul %s, K/V %s\n",
               toks->size(), windows->size(), o.ctx, order, o.kv.c_str());

  ppl_accumulator ppl;
  kl_accumulator kl;
  const auto t0 = std::chrono::steady_clock::now();
  auto st = evaluate(*be.value(), *windows, [&](const eval_chunk& c) -> troupe::status {
    ppl.add(c);
    std::fprintf(stderr, "[%d] %.4f\n", c.index + 1, ppl.ppl());
    if (writer) return writer->write(c);
    if (reader) {
      auto base = reader->next();
      if (!base) return troupe::make_error("--kl-base: " + base.error());
      return kl.add(*base, c);
    }
    return {};
  });
  if (!st) return fail(st.error());
  if (writer)
    if (auto s = writer->close(); !s) return fail("--save-logits: " + s.error());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("perplexity: %.4f over %lld tokens (%.1f s, %.0f tokens/s evaluated)\n", ppl.ppl(),
              static_cast<long long>(ppl.count()), secs,
              static_cast<double>(windows->size()) * o.ctx / (secs > 0 ? secs : 1));
  if (reader) {
    const auto s = kl.summary();
    std::printf("against %s:\n", o.kl_base.c_str());
    std::printf("  mean KL divergence: %.6f nats\n  p99 KL divergence:  %.6f nats\n  max KL divergence:  %.6f nats\n",
                s.mean_kl, s.p99_kl, s.max_kl);
    std::printf("  top-1 agreement:    %.2f%%\n  perplexity ratio:   %.6f (%.4f / %.4f)\n", 100.0 * s.top1_agreement,
                s.ppl_ratio(), s.ppl_test, s.ppl_reference);
  }
  if (writer) std::printf("log-probabilities written to %s\n", o.save_logits.c_str());
  return 0;
}

troupe::app::register_command reg("eval", "Perplexity of a text, and KL divergence against a reference run's logits",
                                  [](CLI::App& sub) {
  auto o = std::make_shared<eval_cli>();
  sub.add_option("--model,-m", o->model, "GGUF model file")->capture_default_str();
  sub.add_option("--file,-f", o->file, "Text file to score")->required();
  sub.add_option("--ctx,-c", o->ctx, "Tokens per window (the second half of each is scored)")->capture_default_str();
  sub.add_option("--chunks", o->chunks, "Windows to score (0 = all the text fills)")->capture_default_str();
  sub.add_option("--threads", o->threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024));
  sub.add_option("--matmul", o->matmul, "Quantized matmul order: llama.cpp (bit-exact) or fast")->capture_default_str();
  sub.add_option("--kv", o->kv, "K/V memory: f16, f32 or q8")->capture_default_str();
  sub.add_option("--save-logits", o->save_logits,
                 "Write this run's log-probabilities to FILE (the reference: --matmul llama.cpp)");
  sub.add_option("--kl-base", o->kl_base, "Compare with a reference FILE written by --save-logits");
  return [o]() { return run_eval(*o); };
});

}  // namespace

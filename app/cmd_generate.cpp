// `troupe generate`: runs one prompt on the engine directly (no actors, no server) and streams
// the text to stdout, ending with one timing line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "app/command.hpp"
#include "model/batch_generator.hpp"
#include "model/detokenizer.hpp"
#include "model/loaded_model.hpp"
#include "model/stop_matcher.hpp"

namespace {

using namespace troupe::model;

struct generate_options {
  std::string model = default_model_path();
  std::string prompt;
  std::string system;
  bool chat = false;
  int max_tokens = 128;
  sampling_params sampling;
  std::vector<std::string> stops;
  int threads = 0;
  std::string matmul = matmul_order_name(backend_options{}.matmul);
  bool show_special = false;
};

int fail(const std::string& m) {
  std::fprintf(stderr, "troupe generate: %s\n", m.c_str());
  return 1;
}

int run_generate(const generate_options& o) {
  if (o.max_tokens < 1) return fail("--max-tokens must be at least 1");
  if (auto s = o.sampling.validate(); !s) return fail(s.error());
  std::fprintf(stderr, "loading %s ...\n", o.model.c_str());
  auto lm = loaded_model::load(o.model);
  if (!lm) return fail(lm.error());
  auto& m = *lm.value();
  if (!m.chat.warning().empty() && o.chat) std::fprintf(stderr, "warning: %s\n", m.chat.warning().c_str());

  troupe::result<std::vector<int32_t>> prompt = troupe::make_error("unset");
  if (o.chat) {
    std::vector<chat_message> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    if (o.prompt.empty()) return fail("the prompt is empty");
    msgs.push_back({"user", o.prompt});
    prompt = m.encode_chat(msgs);
  } else {
    prompt = m.encode_prompt(o.prompt);
  }
  if (!prompt) return fail(prompt.error());
  const int n_ctx = m.weights->params().n_ctx_train;
  if (static_cast<int64_t>(prompt->size()) + o.max_tokens > n_ctx)
    return fail("the prompt has " + std::to_string(prompt->size()) + " tokens; with --max-tokens " +
                std::to_string(o.max_tokens) + " it exceeds the model context of " + std::to_string(n_ctx) + " tokens");

  backend_options bo;
  bo.n_threads = o.threads;
  if (auto order = parse_matmul_order(o.matmul)) bo.matmul = *order;
  else return fail("--matmul must be fast or llama.cpp, not '" + o.matmul + "'");
  bo.kv_bytes = static_cast<int64_t>(prompt->size() + static_cast<size_t>(o.max_tokens) + 64) *
                    static_cast<int64_t>(m.weights->params().n_kv_dim()) * m.weights->params().n_layer * 4 +
                (1 << 20);
  auto be = make_backend("cpu", m.weights, bo);
  if (!be) return fail(be.error());

  generation_request req;
  req.prompt = prompt.value();
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.stop_ids = m.vocab.eog_ids();

  detokenizer::options dopt;
  dopt.render_special = o.show_special;
  detokenizer detok(m.vocab, dopt);
  stop_matcher stops(o.stops);
  bool stopped_by_string = false;
  batch_generator gen(*be.value(), 512);
  generation_stats st;
  auto out = gen.run({req}, &st, [&](size_t, int32_t tok) {
    if (stops.stopped()) return;
    auto text = stops.push(detok.push(tok));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    stopped_by_string = stops.stopped();
  });
  if (!out[0].error.empty()) return fail(out[0].error);
  auto tail = stops.push(detok.flush()) + stops.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::printf("\n");
  const double pf = st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0;
  const int64_t decoded = std::max<int64_t>(0, st.generated_tokens - 1);  // the first comes from prefill
  const double dc = st.decode_seconds > 0 ? decoded / st.decode_seconds : 0.0;
  std::fprintf(stderr, "[prompt: %lld tokens, %.1f tokens/s | generated: %lld tokens, %.1f tokens/s | finish: %s]\n",
               static_cast<long long>(st.prompt_tokens), pf, static_cast<long long>(st.generated_tokens), dc,
               stopped_by_string ? "stop" : out[0].finish_reason.c_str());
  return 0;
}

troupe::app::register_command reg("generate", "Generate text from a prompt with the engine directly", [](CLI::App& sub) {
  auto o = std::make_shared<generate_options>();
  sub.add_option("--model,-m", o->model, "GGUF model file")->capture_default_str();
  sub.add_option("--prompt,-p", o->prompt, "Prompt text")->required();
  sub.add_flag("--chat", o->chat, "Format the prompt as a user message with the model's chat template");
  sub.add_option("--system", o->system, "System message (with --chat)");
  sub.add_option("--max-tokens,-n", o->max_tokens, "Maximum tokens to generate")->capture_default_str();
  sub.add_option("--temperature,-t", o->sampling.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  sub.add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)");
  sub.add_option("--top-p", o->sampling.top_p, "Top-p (1 = off)");
  sub.add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)");
  sub.add_option("--repeat-penalty", o->sampling.repetition_penalty, "Repetition penalty (1 = off)");
  sub.add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty");
  sub.add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty");
  sub.add_option("--seed,-s", o->sampling.seed, "Random seed (same seed and prompt, same output)");
  sub.add_option("--stop", o->stops, "Stop string (repeatable)");
  sub.add_option("--threads", o->threads, "Threads (0 = all cores)");
  sub.add_option("--matmul", o->matmul, "Quantized matmul order: llama.cpp (bit-exact) or fast")->capture_default_str();
  sub.add_flag("--special", o->show_special, "Show special tokens in the output");
  return [o]() { return run_generate(*o); };
});

}  // namespace

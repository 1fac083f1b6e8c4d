// `troupe generate`: runs one prompt on the engine directly (no actors, no server) and streams
// the text to stdout, ending with one timing line. With --speculative (a proposer's name) the
// prompt runs through the serving pipeline in process instead (one request, no cache, no
// network): speculative verification lives in the scheduler and the executor, and this command
// uses theirs rather than a copy; the timing line then says what was proposed and accepted.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "actors/client.hpp"
#include "actors/runtime.hpp"
#include "actors/scheduler/speculative/proposer.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "app/command.hpp"
#include "app/file_text.hpp"
#include "model/batch_generator.hpp"
#include "model/detail/tokenizer_utf8.hpp"
#include "model/detokenizer.hpp"
#include "model/loaded_model.hpp"
#include "model/stop_matcher.hpp"
#include "structured/constraint.hpp"
#include "structured/mask_logits.hpp"

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
  // Structured output (at most one). Given but empty is an error, as the API's empty ones are.
  std::optional<std::string> json_schema_file;
  std::optional<std::string> grammar_file;
  std::optional<std::string> regex;
  std::optional<std::string> choice;   // a JSON array of strings
  bool json_object = false;
  // Speculative decoding: "off" (the engine directly), or a proposer's name (the pipeline).
  std::string speculative = "off";
  std::optional<int> spec_k;  // most guesses a step; absent: the [speculative] default
};

troupe::result<troupe::structured::constraint_spec> constraint_of(const generate_options& o) {
  namespace kind = troupe::structured::kind;
  std::vector<troupe::structured::constraint_spec> asked;
  for (const auto& [flag, value] : {std::pair{"--json-schema", &o.json_schema_file}, {"--grammar", &o.grammar_file},
                                     {"--regex", &o.regex}, {"--choice", &o.choice}})
    if (*value && (*value)->empty()) return troupe::make_error(std::string(flag) + " must not be empty");
  if (o.json_schema_file) {
    auto t = troupe::app::read_file_text(*o.json_schema_file);
    if (!t) return troupe::make_error("--json-schema: " + t.error());
    asked.push_back({kind::json_schema, *t});
  }
  if (o.grammar_file) {
    auto t = troupe::app::read_file_text(*o.grammar_file);
    if (!t) return troupe::make_error("--grammar: " + t.error());
    asked.push_back({kind::grammar, *t});
  }
  if (o.regex) asked.push_back({kind::regex, *o.regex});
  if (o.choice) asked.push_back({kind::choice, *o.choice});
  if (o.json_object) asked.push_back({kind::json_object, ""});
  if (asked.size() > 1) return troupe::make_error("give at most one of --json-schema, --grammar, --regex, --choice, --json-object");
  return asked.empty() ? troupe::structured::constraint_spec{} : asked.front();
}

int fail(const std::string& m) {
  std::fprintf(stderr, "troupe generate: %s\n", m.c_str());
  return 1;
}

// The speculative options as the scheduler takes them, checked (an unknown method lists the
// known ones).
troupe::result<troupe::actors::speculative_config> speculative_of(const generate_options& o) {
  troupe::actors::speculative_config c;
  c.method = o.speculative;
  if (o.spec_k) {
    if (*o.spec_k < 1 || *o.spec_k > 32) return troupe::make_error("--spec-k must be in 1..32");
    c.k = *o.spec_k;
  }
  if (auto st = troupe::actors::check_speculative_config(c); !st) return troupe::make_error("--speculative: " + st.error());
  return c;
}

// One request through the pipeline in process, speculating with `spec`; prints its text as it
// comes and the timing line.
int run_pipelined(const generate_options& o, const loaded_model& m, const std::vector<int32_t>& prompt,
                  const backend_options& bo, const troupe::structured::constraint_spec& constraint,
                  const troupe::actors::speculative_config& spec) {
  using namespace troupe::actors;
  using clock_type = std::chrono::steady_clock;
  pipeline_config cfg;
  cfg.model_name = m.id;
  cfg.cache.enabled = false;
  cfg.scheduler.max_num_seqs = 1;
  cfg.scheduler.speculative = spec;
  cfg.admission.max_tokens_cap = std::max(cfg.admission.max_tokens_cap, o.max_tokens);
  runtime rt;
  auto p = pipeline::start(rt.system(), cfg, m.weights, bo);
  if (!p) return fail(p.error());
  request_spec r;
  r.prompt_tokens = prompt;
  r.sampling = o.sampling;
  r.max_tokens = o.max_tokens;
  r.stop = o.stops;
  r.constraint = constraint;
  r.speculative = spec.method;
  r.cache = troupe::cache::cache_choice::refused;
  client c(**p);
  auto s = c.submit(r);
  const auto t0 = clock_type::now();
  clock_type::time_point first{};
  bool seen = false;
  while (auto e = s->next(std::chrono::hours(24))) {
    if (auto* t = std::get_if<token_event>(&*e)) {
      if (!seen) first = clock_type::now(), seen = true;
      std::fwrite(t->text.data(), 1, t->text.size(), stdout);
      std::fflush(stdout);
    } else if (auto* d = std::get_if<done_event>(&*e)) {
      const auto end = clock_type::now();
      std::fwrite(d->text.data(), 1, d->text.size(), stdout);
      std::printf("\n");
      const auto& u = d->usage;
      const double ttft = seen ? std::chrono::duration<double>(first - t0).count() : 0.0;
      const double span = seen ? std::chrono::duration<double>(end - first).count() : 0.0;
      // As on the direct path: the first token comes with the prompt, the rest are decode.
      const double pf = ttft > 0 ? u.prompt_tokens / ttft : 0.0;
      const double dc = span > 0 && u.completion_tokens > 1 ? (u.completion_tokens - 1) / span : 0.0;
      std::fprintf(stderr,
                   "[prompt: %d tokens, %.1f tokens/s | generated: %d tokens, %.1f tokens/s | finish: %s | "
                   "speculative: %d proposed, %d accepted (%.0f%%)]\n",
                   u.prompt_tokens, pf, u.completion_tokens, dc, d->finish_reason.c_str(), u.speculative_proposed,
                   u.speculative_accepted,
                   u.speculative_proposed > 0 ? 100.0 * u.speculative_accepted / u.speculative_proposed : 0.0);
      (*p)->stop();
      return 0;
    } else {
      const auto& err = std::get<error_event>(*e);
      (*p)->stop();
      return fail(err.message);
    }
  }
  (*p)->stop();
  return fail("the pipeline ended the request without an answer");
}

int run_generate(const generate_options& o) {
  if (o.max_tokens < 1) return fail("--max-tokens must be at least 1");
  if (!o.system.empty() && !o.chat) return fail("--system needs --chat (a system message is part of the chat template)");
  // Named by the flag and its own offset (the chat template's text around it would shift it).
  for (const auto& [flag, text] : {std::pair{"--prompt", &o.prompt}, {"--system", &o.system}})
    if (const size_t bad = troupe::model::detail::find_invalid_utf8(*text); bad != std::string_view::npos)
      return fail(std::string(flag) + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  if (auto s = o.sampling.validate(); !s) return fail(s.error());
  auto speculative = speculative_of(o);
  if (!speculative) return fail(speculative.error());
  const bool pipelined = speculative->method != "off";
  if (pipelined && o.show_special)
    return fail("--special is not supported with --speculative (the pipeline's text leaves special tokens out)");
  if (!pipelined && o.spec_k) return fail("--spec-k needs --speculative (a method, not off)");
  for (const auto& stop : o.stops)
    if (stop.empty()) return fail("--stop must not be empty (an empty stop string would match everywhere)");
  auto spec = constraint_of(o);  // before the model: its files and flags are checked first
  if (!spec) return fail(spec.error());
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
  if (pipelined) return run_pipelined(o, m, *prompt, bo, *spec, *speculative);

  auto be = make_backend("cpu", m.weights, bo);
  if (!be) return fail(be.error());
  std::unique_ptr<troupe::structured::matcher> matcher;
  if (!spec->empty()) {
    auto vocab = std::make_shared<const troupe::structured::token_vocabulary>(m.vocab);
    auto compiled = troupe::structured::compile(*spec, vocab);
    if (!compiled) return fail(compiled.error());
    matcher = std::make_unique<troupe::structured::matcher>(*compiled);
  }

  generation_request req;
  req.prompt = prompt.value();
  if (matcher) {
    req.shape_logits = [&matcher, eog = m.vocab.eog_ids(), bits = std::vector<uint64_t>(),
                         max = o.max_tokens](std::vector<float>& logits) mutable {
      troupe::structured::mask_logits(*matcher, logits.data(), static_cast<int32_t>(logits.size()), eog, bits,
                                      max - matcher->n_accepted());
    };
  }
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
    if (matcher) matcher->accept(tok);
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
  sub.add_option("--seed,-s", o->sampling.seed, "Random seed (same seed and prompt, same output; a negative one wraps, as the API's seed does)");
  sub.add_option("--stop", o->stops, "Stop string (repeatable)");
  sub.add_option("--threads", o->threads, "Threads (0 = all cores)")->check(CLI::Range(0, 1024));
  sub.add_option("--matmul", o->matmul, "Quantized matmul order: llama.cpp (bit-exact) or fast")->capture_default_str();
  sub.add_flag("--special", o->show_special, "Show special tokens in the output");
  sub.add_option("--json-schema", o->json_schema_file, "Constrain the output to a JSON Schema (a file)");
  sub.add_flag("--json-object", o->json_object, "Constrain the output to a JSON object");
  sub.add_option("--grammar", o->grammar_file, "Constrain the output to a GBNF grammar (a file; root rule `root`)");
  sub.add_option("--regex", o->regex, "Constrain the output to a regular expression");
  sub.add_option("--choice", o->choice, "Constrain the output to one of a JSON array of strings");
  sub.add_option("--speculative", o->speculative,
                 "Speculative decoding: off, or a proposer (ngram, suffix, ...); a proposer runs the prompt "
                 "through the serving pipeline in process")
      ->capture_default_str();
  sub.add_option("--spec-k", o->spec_k, "With --speculative: most tokens guessed per step (1..32; default: the [speculative] k)");
  return [o]() { return run_generate(*o); };
});

}  // namespace

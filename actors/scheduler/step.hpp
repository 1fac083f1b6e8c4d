#pragma once
// The plain values of one engine step (see DESIGN.md, "The engine step"):
//   step_plan    scheduler → executor: which sequences run, the tokens each feeds, block tables
//   step_result  executor → scheduler: per sampling sequence the sampled token and its logprob
//   step_output  scheduler → streamer: new tokens per request, and requests that ended
// No pointers into anybody's state; all have `inspect`, so an executor may live on another host.
#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actors/request.hpp"
#include "model/sampler.hpp"

namespace troupe::actors {

struct step_entry {
  uint64_t seq_id = 0;
  std::vector<int32_t> tokens;       // tokens fed this step (a prompt chunk, or a known last token)
  // Also feed, after `tokens`, the token this executor sampled for the sequence in the step just
  // before this one. That is how the scheduler plans step N+1 while step N still runs.
  bool feed_last_sample = false;
  int32_t n_past = 0;                // tokens of the sequence already in KV memory
  std::vector<int32_t> block_table;  // covers n_past + fed tokens
  bool sample = false;               // sample a token from the last fed position
  model::sampling_params sampling;
  bool logprob = false;              // the sample's logprob is wanted
  std::vector<int32_t> recent;       // penalty window (only sent when a penalty is on)
  int64_t n_generated = 0;           // tokens generated before this sample (selects the draw)
  int32_t n_prompt = 0;              // the sequence's prompt length (model::batch_sequence::n_prompt)
  // Structured output: the sample must keep the output a valid prefix of the constraint. The
  // executor keeps each sequence's matcher between steps; `generated` (the tokens generated and
  // known when planned: all but a sample still in flight) rebuilds it where it has none (after a
  // restart, on another replica).
  structured::constraint_spec constraint;
  std::vector<int32_t> generated;
  int32_t remaining = 0;             // with a constraint: tokens it may still generate, this one included
  // Speculative decoding: tokens guessed to follow, fed after the others. The executor samples
  // the last fed token's position and every proposed one (the j-th with draw n_generated + j, the
  // penalty window and the constraint's matcher advanced through the j guesses before it), and
  // keeps the proposed tokens up to the first that differs from its sample, plus that sample
  // (sampled_token::more, with each kept position's logprob and alternatives when `logprob`).
  // Only with `sample`.
  std::vector<int32_t> proposal;

  int32_t n_fed() const {
    return static_cast<int32_t>(tokens.size() + proposal.size()) + (feed_last_sample ? 1 : 0);
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_entry& x) {
  return f(caf::meta::type_name("step_entry"), x.seq_id, x.tokens, x.feed_last_sample, x.n_past, x.block_table,
           x.sample, x.sampling, x.logprob, x.recent, x.n_generated, x.n_prompt, x.constraint, x.generated, x.remaining, x.proposal);
}

struct step_plan {
  uint64_t step = 0;                 // increasing per scheduler
  std::vector<step_entry> entries;
  int32_t n_tokens() const {
    int32_t n = 0;
    for (const auto& e : entries) n += e.n_fed();
    return n;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step, x.entries);
}

struct sampled_token {
  uint64_t seq_id = 0;
  int32_t token = -1;
  float logprob = 0;
  std::vector<model::token_logprob> top;
  std::string error;  // token -1: why (empty: the row was left out of the step)
  // Speculative decoding: the tokens after `token` that this step also produced (the accepted
  // proposed tokens, then the sample at the first rejected position or after the last one), and
  // their logprobs and alternatives where `logprob` is set (more_top[j]: more[j]'s top
  // n_logprobs, as `top` is token's).
  std::vector<int32_t> more;
  std::vector<float> more_logprob;
  std::vector<std::vector<model::token_logprob>> more_top;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampled_token& x) {
  return f(caf::meta::type_name("sampled_token"), x.seq_id, x.token, x.logprob, x.top, x.error, x.more, x.more_logprob,
           x.more_top);
}

struct step_result {
  uint64_t step = 0;
  std::vector<sampled_token> samples;  // one per entry with `sample`, in plan order
  std::string error;                   // non-empty: the backend refused the step (nothing sampled)
  int64_t forward_us = 0;              // time inside backend::forward
  int64_t sample_us = 0;               // time spent sampling
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step, x.samples, x.error, x.forward_us, x.sample_us);
}

// --- scheduler → streamer ----------------------------------------------------------------

// A sequence's figures so far, as its done event reports them (seq_finished has them at the end).
// Each token carries them: the streamer ends a stream itself (a stop string, a filter, a cancel,
// a reader too slow) and then reports the last it saw.
struct seq_figures {
  usage_info usage;
  double queue_ms = 0;
  int32_t preemptions = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, seq_figures& x) {
  return f(caf::meta::type_name("seq_figures"), x.usage, x.queue_ms, x.preemptions);
}

struct token_out {
  uint64_t id = 0;
  int32_t token = -1;
  float logprob = 0;
  std::vector<model::token_logprob> top;
  seq_figures so_far;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_out& x) {
  return f(caf::meta::type_name("token_out"), x.id, x.token, x.logprob, x.top, x.so_far);
}

struct seq_finished {
  uint64_t id = 0;
  std::string reason;                // finish::stop, finish::length, finish::deadline
  usage_info usage;
  double queue_ms = 0;
  int32_t preemptions = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, seq_finished& x) {
  return f(caf::meta::type_name("seq_finished"), x.id, x.reason, x.usage, x.queue_ms, x.preemptions);
}

struct seq_failed {
  uint64_t id = 0;
  std::string code;                  // errc::*
  std::string message;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, seq_failed& x) {
  return f(caf::meta::type_name("seq_failed"), x.id, x.code, x.message);
}

// What one scheduler event produced; the streamer handles tokens, then finishes, then failures.
struct step_output {
  std::vector<token_out> tokens;
  std::vector<seq_finished> finished;
  std::vector<seq_failed> failed;
  bool empty() const { return tokens.empty() && finished.empty() && failed.empty(); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_output& x) {
  return f(caf::meta::type_name("step_output"), x.tokens, x.finished, x.failed);
}

}  // namespace troupe::actors

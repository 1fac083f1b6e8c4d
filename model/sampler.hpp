#pragma once
// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, repetition / frequency /
// presence penalties, per-request seeds and logprobs. Stateless: randomness comes from
// (seed, number of tokens generated so far), so a request's output does not depend on which
// other requests share its batch.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace troupe::model {

// OpenAI `logit_bias`: added to the token's logit before anything else (-100 bans, +100 forces).
struct token_bias {
  int32_t token = -1;
  float bias = 0.0f;
};

struct sampling_params {
  float temperature = 0.0f;          // 0 = greedy
  int32_t top_k = 0;                 // 0 = off
  float top_p = 1.0f;                // 1 = off
  float min_p = 0.0f;                // 0 = off
  float repetition_penalty = 1.0f;   // 1 = off (llama.cpp / CTRL style: divide positive logits)
  float frequency_penalty = 0.0f;    // OpenAI style: minus count * f
  float presence_penalty = 0.0f;     // OpenAI style: minus p if present
  int32_t penalty_last_n = 64;       // how many recent tokens the penalties look at
  uint64_t seed = 0;
  int32_t n_logprobs = 0;            // top alternatives to report (0..20)
  std::vector<token_bias> logit_bias;  // at most one entry per token

  // Names the first parameter out of range, if any.
  status validate() const;
  // Greedy with no penalties and no alternatives asked: the token is the logits' first maximum,
  // which needs none of the log-softmax over the vocabulary that a logprob does.
  bool plain_greedy() const {
    return temperature <= 0.0f && n_logprobs == 0 && repetition_penalty == 1.0f && frequency_penalty == 0.0f &&
           presence_penalty == 0.0f && logit_bias.empty();
  }
  // Whether sampling a row costs more than finding its maximum (a pass or more over the
  // vocabulary): worth spreading such rows over threads (backend::for_each_row).
  bool costly(bool want_logprob) const { return want_logprob || !plain_greedy(); }
};

struct token_logprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct sample_result {
  int32_t token = -1;
  float logprob = 0.0f;                 // log-probability of the chosen token (after penalties);
                                        // NaN when not asked for and not needed (see sample_token)
  std::vector<token_logprob> top;       // n_logprobs most likely alternatives
};

// `recent` holds the sequence's previous tokens (the last penalty_last_n are used);
// `n_generated` is how many tokens this request has sampled before (selects the random draw).
// Without want_logprob, plain greedy sampling (sampling_params::plain_greedy) only finds the
// maximum and leaves the logprob NaN; every other kind computes it anyway.
sample_result sample_token(const float* logits, int32_t n_vocab, const sampling_params& p,
                           const std::vector<int32_t>& recent, int64_t n_generated, bool want_logprob = true);

}  // namespace troupe::model

#pragma once
// Runs a fixed set of requests to completion on a backend: all prompts are prefilled in chunks
// under a token budget, then all sequences decode together, one batched step per token. The
// engine-level driver behind `troupe generate`, `troupe bench engine` and the reference tests
// (the serving path uses the scheduler actor instead).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/kv_manager.hpp"
#include "model/sampler.hpp"

namespace troupe::model {

struct generation_request {
  std::vector<int32_t> prompt;
  sampling_params sampling;
  int32_t max_tokens = 32;
  std::vector<int32_t> stop_ids;       // end-of-generation tokens (not emitted)
  bool logprobs = false;               // each chosen token's logprob in samples (plain greedy
                                       // sampling leaves them NaN otherwise, as serving does)
  // Called before each sample with a copy of the row's logits, which it may change (a
  // structured-output mask sets disallowed tokens to -inf). May run on any of the backend's threads.
  std::function<void(std::vector<float>& logits)> shape_logits;
};

struct generation_output {
  std::vector<int32_t> tokens;
  std::vector<sample_result> samples;  // per generated token (with top logprobs when asked)
  std::vector<std::vector<float>> logits;  // per step, when keep_logits is set
  std::string finish_reason;           // "stop" or "length"
  std::string error;                   // non-empty when the request failed
};

struct generation_stats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  int64_t decode_steps = 0;
  kv_usage peak_kv;
};

class batch_generator {
 public:
  batch_generator(backend& be, int32_t max_batched_tokens = 512, bool prefix_caching = false);

  // on_token(request index, token) is called as tokens are produced.
  std::vector<generation_output> run(const std::vector<generation_request>& reqs, generation_stats* stats = nullptr,
                                     const std::function<void(size_t, int32_t)>& on_token = {},
                                     bool keep_logits = false);

 private:
  backend& be_;
  int32_t max_batched_tokens_;
  bool prefix_caching_;
};

}  // namespace troupe::model

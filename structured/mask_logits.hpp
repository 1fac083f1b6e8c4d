#pragma once
// Applies a matcher's allowed tokens to a row of logits: everything else becomes -inf, so that the
// sampler (penalties, logit_bias, top-k/p, logprobs) only ever sees tokens the constraint allows.
// End-of-generation tokens stay where the output may end — and where the vocabulary cannot
// continue it at all, so that a row always has a token to sample. Used by the executor and by
// `troupe generate`.
#include <cstdint>
#include <vector>

#include "structured/constraint.hpp"

namespace troupe::structured {

// `remaining`: the tokens the request may still generate, this one included (0: no bound known).
// When it runs short — no more than the bytes that close the output (each token makes at least
// one), the end token and `closing_margin` besides — only tokens along the shortest completion
// are allowed, so that a structured output ends complete rather than cut off at max_tokens. An
// output that may end where it is (free text, a tool-call grammar's text part) is not ended early:
// it may run to the budget's end, each token keeping it closable.
inline constexpr int64_t closing_margin = 16;

// `mask` is scratch space for the allowed-token bits (kept by the caller to reuse its memory).
void mask_logits(matcher& m, float* logits, int32_t n_vocab, const std::vector<int32_t>& eog,
                 std::vector<uint64_t>& mask, int64_t remaining = 0);

}  // namespace troupe::structured

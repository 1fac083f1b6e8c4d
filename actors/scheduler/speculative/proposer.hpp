#pragma once
// Speculative decoding's proposers: each guesses the next tokens of a sequence from tokens it
// has seen, without running the model. The scheduler feeds [last token, guesses...] as one chunk;
// the executor checks every guess against the model's own choice at that position and keeps the
// longest prefix that matches, plus the model's next token. A proposer only decides how many
// tokens a step may yield, never which ones: the output is the same with any of them, or none.
//
// Chosen by name from proposer_registry() like the scheduling policies (policies/): "ngram"
// (prompt lookup, ngram.cpp), "suffix" (suffix decoding over the request's own tokens and recent
// outputs, suffix.cpp), "draft" (a smaller model with the same vocabulary run k greedy steps
// ahead, draft.cpp). "off" is no proposer. Each scheduler makes its own instances (one per
// replica), so what a proposer learns across requests is that scheduler's, never process-wide.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/named_registry.hpp"
#include "common/result.hpp"

namespace troupe::actors {

// The [speculative] section (config/reference.toml documents each key).
struct speculative_config {
  std::string method = "off";     // "off" or a name in proposer_registry(); a request may choose another
                                  // (off by default: bench/README.md, "Speculative decoding")
  int32_t k = 4;                  // most tokens proposed in one step (each request adapts within it)
  int32_t ngram_min = 2;          // ngram and suffix: the shortest suffix of the sequence to look up
  int32_t ngram_max = 4;          // ngram: the longest (tried first)
  // A request whose rolling acceptance (accepted / proposed, half weight on the newest step)
  // falls below this stops proposing for probe_steps decode steps, then tries again (a failed
  // probe backs off twice as long, up to 16x). probe_steps is also how often a refusing cost rule
  // is tested again (scheduler_state::note_rule_refusal). 8, not more: a copying request's
  // guesses fail in bursts where the output leaves the source, and a long back-off there cost
  // the copy-heavy prompts of `troupe bench spec` a third of their accepted tokens. 0.1, not
  // 0.3: two failed guesses in a row (where a copy resumes after an edit) turned a copying
  // request off; at 0.1 the copy set keeps 87-89 of 227 tokens instead of 77-78, and the chat
  // set proposes and keeps the same (its guesses are refused by the cost rule, not by this);
  // bench/README.md "The lookup bound".
  double min_acceptance = 0.1;
  int32_t probe_steps = 8;
  // Nobody speculates in a step with more running sequences than this. 0: no fixed bound; the
  // bound that counts is measured (step_cost.hpp: speculation only where the verified positions'
  // measured extra time is paid for by the tokens the sequence's acceptance promises).
  int32_t max_batch = 0;
  // The measured rule above (with a draft's own forwards counted). false: speculate wherever the
  // acceptance allows, whatever the step times say — to test a proposer's acceptance (a model as
  // its own draft never pays), or where timings mislead. Outputs are the same either way.
  bool cost_rule = true;
  // draft: the draft model's GGUF (required with method = "draft"; its vocabulary must be the
  // model's), its backend threads (0: all cores) and its own KV memory.
  std::string draft_model;
  int32_t draft_threads = 0;
  int64_t draft_kv_bytes = int64_t{64} << 20;
};

inline bool operator==(const speculative_config& a, const speculative_config& b) {
  return a.method == b.method && a.k == b.k && a.ngram_min == b.ngram_min && a.ngram_max == b.ngram_max &&
         a.min_acceptance == b.min_acceptance && a.probe_steps == b.probe_steps && a.max_batch == b.max_batch &&
         a.cost_rule == b.cost_rule && a.draft_model == b.draft_model && a.draft_threads == b.draft_threads && a.draft_kv_bytes == b.draft_kv_bytes;
}

// One sequence's part of a step's proposals (proposer::propose_batch).
struct proposal_request {
  uint64_t seq = 0;
  const std::vector<int32_t>* context = nullptr;  // the prompt, then the output so far
  int32_t n_prompt = 0;                           // how many of context are the prompt
  int32_t max_k = 0;
  std::vector<int32_t> tokens;                    // the answer: at most max_k guesses
};

class proposer {
 public:
  virtual ~proposer() = default;
  virtual std::string name() const = 0;
  // Up to max_k tokens guessed to follow `context` (the request's prompt, then its output so
  // far); fewer or none where it has no good guess.
  virtual std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& context, int32_t max_k) = 0;
  // A step's proposals, all at once: fills each request's tokens. The scheduler calls this once
  // per step with every sequence that speculates in it, so that a proposer that runs a model
  // (draft) runs one forward per guessed position for all of them. Default: propose() each.
  virtual void propose_batch(std::vector<proposal_request>& reqs) {
    for (auto& r : reqs) r.tokens = propose(r.seq, *r.context, r.max_k);
  }
  // Whether a guess is likely one token from now. The scheduler asks while a sequence's last
  // sample is in flight, to choose between waiting for that sample (the sequence sits out a
  // pipelined step, then guesses) and pipelining on without a guess: waiting for a guess that
  // does not come costs the sequence a step. Default: whether there is a guess for the token in
  // flight now (a lookup proposer's guesses come in runs: where the text follows an earlier
  // passage, it goes on following it). A proposer that always guesses, or whose propose is
  // expensive, overrides it.
  virtual bool expects_guess(uint64_t seq, const std::vector<int32_t>& context) {
    return !propose(seq, context, 1).empty();
  }
  // The wall time, in microseconds, that guessing g tokens adds to a step (a draft model's
  // forwards, which run while the step waits for them): the scheduler counts it with the
  // verified positions' cost when it decides whether speculation pays. 0 for proposers that only
  // look tokens up (their cost is in the scheduler's own step time).
  virtual double guess_cost_us(int32_t g) const {
    (void)g;
    return 0.0;
  }
  // Whether guessing runs a model (a draft). Until its guess_cost_us is measured the cost rule
  // lets one sequence a step try it: a first try over a whole batch would pay every sequence's
  // catch-up (its context fed to the model) at once, before the rule could know it does not pay.
  virtual bool runs_model() const { return false; }
  // The sequence ended (or was dropped) with these tokens, the first n_prompt of them its prompt.
  // Called on every proposer its scheduler has made, whichever method the sequence used: a
  // proposer that learns across requests keeps what it wants; per-sequence state is forgotten.
  virtual void on_end(uint64_t seq, const std::vector<int32_t>& context, int32_t n_prompt) {
    (void)seq;
    (void)context;
    (void)n_prompt;
  }
};

using proposer_factory = std::function<result<std::unique_ptr<proposer>>(const speculative_config&)>;

// The process-wide registry of proposers, holding the built-ins from its first use.
named_registry<proposer_factory>& proposer_registry();

// Checks a [speculative] section: ranges, and a method that is "off" or registered.
status check_speculative_config(const speculative_config& c);

namespace proposers {
void add_ngram(named_registry<proposer_factory>& r);
void add_suffix(named_registry<proposer_factory>& r);
void add_draft(named_registry<proposer_factory>& r);
}  // namespace proposers

}  // namespace troupe::actors

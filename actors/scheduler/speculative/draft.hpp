#pragma once
// `draft`: a second, smaller model with the target's vocabulary guesses the next tokens by
// decoding k greedy steps ahead of each speculating sequence. It runs on the cpu backend with
// its own KV memory (speculative.draft_kv_mib) and its own block tables: per sequence it keeps
// the tokens whose K/V it holds, cuts them back to the common prefix with the context it is
// given (the target rejected the rest), feeds what is missing and decodes. A step's speculating
// sequences go together (propose_batch): one draft forward per guessed position for all of them.
//
// Bounded memory: when its blocks run out, it first drops the K/V of sequences not in this step
// (least recently used first), then proposes nothing for the sequence that does not fit; a
// request never fails for it. Where the draft is wrong the target rejects its guesses and the
// rolling acceptance turns speculation off for the request; the output is unchanged either way.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/scheduler/speculative/proposer.hpp"
#include "model/backend.hpp"
#include "model/gguf_reader.hpp"
#include "model/kv_manager.hpp"
#include "model/llama_model.hpp"

namespace troupe::actors::proposers {

// The draft must speak the target's vocabulary token for token: an error naming both files and
// both sizes, or the first token that differs (the caller names the key).
status check_draft_vocabulary(const model::gguf_file& target, const model::gguf_file& draft);
// speculative.draft_model against model.path, as the config loader checks them: the draft must
// open as GGUF and match the target's vocabulary. A target that does not open is left to the
// model's own loading (its error names model.path).
status check_draft_model(const std::string& draft_path, const std::string& target_path);

class draft_proposer final : public proposer {
 public:
  // The draft over `m` (its hyper-parameters and weights), with c's draft_threads and
  // draft_kv_bytes.
  static result<std::unique_ptr<draft_proposer>> make(std::shared_ptr<model::llama_model> m,
                                                      const speculative_config& c);

  std::string name() const override { return "draft"; }
  std::vector<int32_t> propose(uint64_t seq, const std::vector<int32_t>& context, int32_t max_k) override;
  void propose_batch(std::vector<proposal_request>& reqs) override;
  void on_end(uint64_t seq, const std::vector<int32_t>& context, int32_t n_prompt) override;
  // A draft model always guesses (and asking it would cost forwards).
  bool expects_guess(uint64_t, const std::vector<int32_t>&) override { return true; }
  // g draft forwards at their measured mean wall time (one forward per guessed position, all of
  // a step's speculating sequences in it): counted whole for each sequence, which errs towards
  // not speculating when several share the forwards.
  // Catch-up forwards count too (a new sequence's prompt fed in one): paid once per sequence,
  // they make its later guesses look dear, which errs towards not speculating. (Timing only the
  // guessing forwards let the model as its own draft speculate at batch 1 at 0.45x of off on an
  // AVX2 CPU: the rule's estimate of a draft's cost runs low, see bench/README.md.)
  double guess_cost_us(int32_t g) const override { return forward_us_ * g; }
  bool runs_model() const override { return true; }

  // For tests and benchmarks: draft forwards run so far, and the draft's own KV bookkeeping.
  int64_t forwards() const { return forwards_; }
  // Context tokens fed to the draft to catch up (prompts, accepted tokens).
  int64_t fed_tokens() const { return fed_tokens_; }
  const model::kv_manager& kv() const { return kv_; }

 private:
  draft_proposer(std::shared_ptr<model::llama_model> m, std::unique_ptr<model::backend> be);
  struct seq_state {
    std::vector<int32_t> cached;  // tokens whose K/V the draft holds, in order
    uint64_t last_used = 0;       // the propose_batch call that last used it (eviction order)
  };
  // Cuts `seq` back to its first n cached tokens.
  void keep(uint64_t seq, seq_state& s, int32_t n);
  void forget(uint64_t seq);
  // Room for `seq` to hold n tokens, dropping idle sequences' K/V when needed.
  bool make_room(uint64_t seq, int32_t n, const std::vector<uint64_t>& busy);
  // One forward (its wall time moves forward_us_); the argmax of each returned row in batch
  // order, or nothing on an error.
  std::vector<int32_t> forward_argmax(const model::batch& b);

  std::shared_ptr<model::llama_model> m_;
  std::unique_ptr<model::backend> be_;
  model::kv_manager kv_;
  int32_t n_vocab_ = 0;
  int32_t max_positions_ = 0;
  std::unordered_map<uint64_t, seq_state> seqs_;
  uint64_t calls_ = 0;
  int64_t forwards_ = 0;
  int64_t fed_tokens_ = 0;
  double forward_us_ = 0;  // moving average of one draft forward's wall time
};

}  // namespace troupe::actors::proposers

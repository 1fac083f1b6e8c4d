#pragma once
// The scheduler's decisions, without CAF: waiting and running sequences, the KV block manager,
// and the two calls of the engine loop: plan() produces the next step as a plain value, apply()
// takes the executor's result. Iteration-level continuous batching with chunked prefill under a
// token budget, automatic prefix caching, preemption by recompute, and a policy object (chosen
// by name) that orders the queues. The scheduler actor is a thin shell around this class.
//
// Pipelining: plan() may be called again while a step is in flight (up to
// max_steps_in_flight). A sequence whose last sample is still in flight then feeds that
// sample by reference (step_entry::feed_last_sample), so the executor never waits for the
// scheduler between steps. A sequence that ends in step N may thus compute one wasted token in
// step N+1; its blocks are freed at once, which is safe because the executor runs steps in order
// and nothing reads a position before a later step writes it.
//
// Speculative decoding (scheduler_config::speculative): a decoding sequence may feed a proposer's
// guesses after its last token (step_entry::proposal); the answer carries every token the step
// produced, and the KV of rejected positions is cut off (kv_manager::truncate) before anything
// hashes it. How many tokens such a step yields is known only when its answer is in, so a
// speculating sequence is not pipelined: it is planned again after its answer (the others are).
// Whether speculating pays at this batch is decided from the measured step times
// (speculative/step_cost.hpp), per sequence from its rolling acceptance; how many guesses it
// makes follows its recently accepted run (spec_k). Penalties and constraints apply per
// verified position (the executor's part).
//
// Fault isolation: when a step fails (the executor answers with an error, throws, or times out)
// its sequences are not failed together, since usually one of them is the cause. They are queued
// again for recompute (their tokens are kept) and become suspects; each suspect then runs alone,
// one step at a time with nothing else in flight, until it has sampled a token. A suspect that
// fails alone is the culprit and gets the error; one that passes rejoins the batch. A sequence
// caught in three failed steps fails even if it never failed alone, which bounds the
// retries when a fault comes and goes.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/request.hpp"
#include "actors/scheduler/policy.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/scheduler/speculative/step_cost.hpp"
#include "actors/scheduler/step.hpp"
#include "model/kv_manager.hpp"

namespace troupe::actors {

class scheduler_state {
 public:
  scheduler_state(scheduler_config cfg, kv_geometry geo, std::unique_ptr<scheduling_policy> policy);

  // Queues a request. One that can never fit the KV memory fails at once (see take_output).
  void enqueue(admitted_request r, int64_t now_us);
  // Forgets a request whose stream the streamer closed (cancel, stop string, slow consumer,
  // consumer gone) and frees its blocks now. An id not seen yet is remembered for a minute, in
  // case the request is still on its way from admission.
  void drop(uint64_t id, int64_t now_us);
  // Flow control from the streamer: a paused sequence keeps its KV but is not scheduled.
  void pause(uint64_t id);
  void resume(uint64_t id);

  // The next step, or nothing when there is no work or enough steps are in flight.
  std::optional<step_plan> plan(int64_t now_us);
  // Takes the executor's answer for the oldest step in flight.
  void apply(const step_result& r, int64_t now_us);
  // The executor failed (or its step failed or timed out) and will be replaced, losing its KV
  // memory. Every request stays: started ones are queued again for recompute from their tokens
  // (what they generated is kept). The sequences of the step that failed become suspects (see
  // fault isolation below); a step of one sequence that failed names its culprit, which fails
  // with errc::executor_fault and `reason`.
  void reset_executor(const std::string& reason);
  // Fails every request (there is no executor any more).
  void fail_all(const std::string& code, const std::string& message);
  // Ends requests whose deadline passed: queued ones fail (errc::deadline), started ones
  // finish with finish::deadline.
  void expire(int64_t now_us);

  // Hot reload: another policy and budgets for the same sequences, KV blocks and queues (the
  // scheduler actor that takes this state over calls it). Only between steps: with no step in
  // flight. Running sequences keep their KV; padding members of a dense batch are released when
  // the new policy does not pad. prefix_caching and the KV geometry stay as they are (they need
  // a restart).
  void reconfigure(scheduler_config cfg, std::unique_ptr<scheduling_policy> policy);

  // Tokens and endings produced since the last call, for the streamer.
  step_output take_output();

  bool empty() const { return seqs_.empty(); }
  int32_t steps_in_flight() const { return static_cast<int32_t>(inflight_.size()); }
  bool can_plan() const { return steps_in_flight() < cfg_.max_steps_in_flight; }
  scheduler_stats stats() const;
  const model::kv_manager& kv() const { return kv_; }
  const scheduler_config& config() const { return cfg_; }
  const scheduling_policy& policy() const { return *policy_; }

 private:
  enum class phase { waiting, running };
  struct seq {
    admitted_request req;
    std::vector<int32_t> tokens;     // prompt, then the generated tokens known so far
    int32_t n_prompt = 0;
    int32_t generated = 0;           // known generated tokens
    int32_t pending_samples = 0;     // samples in flight
    int32_t n_computed = 0;          // positions whose KV is written (current kv_epoch)
    int32_t n_scheduled = 0;         // positions written or being written (current kv_epoch)
    uint32_t kv_epoch = 0;           // bumped on preemption: in-flight KV writes stop counting
    phase ph = phase::waiting;
    bool has_kv = false;
    bool paused = false;
    bool started = false;            // was ever scheduled
    bool pad = false;                // finished, but holding its slot in a dense batch
    int32_t cached_prompt = 0;       // prompt tokens served by the prefix cache (first admission)
    int64_t first_scheduled_us = 0;
    int32_t preemptions = 0;
    // Speculative decoding: the proposer's name ("": none), a step of guesses in flight, the
    // rolling acceptance rate, and decode steps left before proposing again after it fell low.
    std::string spec_method;
    bool spec_inflight = false;
    bool spec_let_pipeline = false;  // its last try found nothing to propose: pipeline one step
    double spec_rate = 1.0;
    double spec_run = -1;            // rolling accepted guesses per speculating step (< 0: none yet)
    int32_t spec_skip = 0;
    int32_t spec_backoffs = 0;       // back-offs in a row (each waits twice as long, up to 16x)
    int32_t spec_proposed = 0;
    int32_t spec_accepted = 0;
    // Fault isolation: answers of steps planned before the fault (kv_epoch below this) are
    // thrown away, samples included; the failed steps it was in; whether it must run alone.
    uint32_t discard_below_epoch = 0;
    int32_t faults = 0;
    bool suspect = false;
  };
  struct inflight_entry {
    uint64_t id;
    uint32_t kv_epoch;
    int32_t n_fed;
    bool sample;
    bool pad;                        // padding of a dense batch
    int32_t proposed = 0;            // speculative tokens fed after the last known one
  };
  struct inflight_step {
    uint64_t step;
    std::vector<inflight_entry> entries;
    int64_t planned_us = 0;
    bool solo = false;               // a suspect run alone (fault isolation)
  };
  // A step being put together by plan().
  struct draft {
    std::vector<step_entry> entries;
    std::unordered_set<uint64_t> ids;
    std::unordered_set<uint64_t> pads;
    int32_t budget = 0;
  };

  seq_view view(const seq& s) const;
  void sort_by_policy(std::vector<uint64_t>& ids, int64_t now_us) const;
  int32_t virtual_len(const seq& s) const { return static_cast<int32_t>(s.tokens.size()) + s.pending_samples; }
  bool done_sampling(const seq& s) const { return s.generated + s.pending_samples >= s.req.max_tokens; }
  step_entry make_entry(seq& s, int32_t n, int64_t now_us) const;
  void unschedule(draft& d, uint64_t id);
  void preempt(uint64_t id);
  std::optional<uint64_t> kv_victim(const draft& d, uint64_t for_id) const;
  // A running sequence that makes no progress (dense-batch padding, or paused by its consumer)
  // and is not in this step's draft: its KV blocks are the cheapest to take.
  std::optional<uint64_t> idle_victim(const draft& d, uint64_t for_id) const;
  std::optional<uint64_t> priority_victim(const seq& waiting, int64_t now_us) const;
  void finish(uint64_t id, const std::string& reason);
  void fail(uint64_t id, const std::string& code, const std::string& message);
  // Fault isolation: the failed step `rec` (its error `why`): its culprit fails when it ran
  // alone, otherwise its sequences are queued again as suspects.
  void step_failed(const inflight_step& rec, const std::string& why);
  // Forgets `s`'s KV and every answer in flight for it; it waits to be computed again.
  void requeue_for_recompute(seq& s);
  // The suspect to run alone next (0: none can run now).
  uint64_t next_suspect() const;
  void remove(uint64_t id);
  void release_pads_if_batch_done();
  step_entry make_pad_entry(const seq& s) const;
  void take_sample(seq& s, const sampled_token& t);
  // Appends a sampled token; false when it ended the sequence (removed, or padding).
  bool take_token(seq& s, int32_t token, float logprob, std::vector<model::token_logprob> top);
  seq_figures figures_of(const seq& s) const;
  // The deadline passed: finished with what it has, or failed (deadline) before its first token.
  void expire_one(uint64_t id);
  // The guesses `s` feeds after its last token this step (none: it decodes one token), at most
  // `room` of them; n_running is the step's batch so far.
  std::vector<int32_t> proposal_for(seq& s, int32_t room, int32_t n_running);
  // Whether `s` may speculate in a step of n_running sequences (its method, its sampling, the
  // batch bound, and whether k guesses at its acceptance pay at this batch: step_cost.hpp; not
  // whether it has a guess).
  bool spec_wanted(const seq& s, int32_t n_running, int32_t extra = 0) const;
  // Whether the proposer of `s` expects a guess once the sample in flight is in
  // (proposer::expects_guess).
  bool spec_expects_guess(seq& s);
  // spec_wanted without the cost rule: its method, its sampling, the batch bound.
  bool spec_allowed(const seq& s, int32_t n_running) const;
  // The cost rule refused `s` a guess in this step; after probe_steps such steps, one sequence is
  // let through (rule_probe_) to measure the step time the rule rests on again.
  void note_rule_refusal(const seq& s);
  // How many guesses `s` may make (before the step's room and max_tokens): k adapted to its
  // recently accepted run.
  int32_t spec_k(const seq& s) const;
  // Whether g guesses of `s` pay in a step of n_running sequences (speculation_pays).
  // extra: guesses of others in the same step (step_guesses_ or next_step_guesses_).
  bool spec_pays(const seq& s, int32_t g, int32_t n_running, int32_t extra) const;
  // The proposer named `method`, made on first use.
  result<proposer*> proposer_of(const std::string& method);
  // Whether a sequence may ask p for guesses in this plan: under the cost rule, a proposer that
  // runs a model whose cost is not measured yet is tried by one sequence a step (model_try_step_;
  // a true answer for it takes that step's try).
  bool may_try(const proposer& p);
  // This step's guesses for every running sequence that may speculate in it, made with one
  // propose_batch call per proposer (a draft model then runs one forward per guessed position
  // for all of them) and kept in batched_guesses_ for proposal_for.
  void propose_batched(uint64_t solo, int32_t n_running);
  void apply_speculation(seq& s, const inflight_entry& e, const sampled_token& t);
  // The policy's batch size limit, within [1, configured].
  int32_t batch_limit() const {
    return std::clamp(policy_->max_num_seqs(cfg_.max_num_seqs), 1, std::max(1, cfg_.max_num_seqs));
  }
  // Tells the policy how the answered step `rec` went (scheduling_policy::on_step).
  void feed_back(const inflight_step& rec, const step_result& r, int64_t latency_us, int64_t now_us,
                 std::map<std::string, int32_t> tenant_tokens);
  int32_t blocks_for(int64_t n_tokens) const {
    return static_cast<int32_t>((n_tokens + geo_.block_size - 1) / geo_.block_size);
  }

  scheduler_config cfg_;
  kv_geometry geo_;
  std::unique_ptr<scheduling_policy> policy_;
  model::kv_manager kv_;
  std::unordered_map<uint64_t, seq> seqs_;
  std::vector<uint64_t> waiting_;
  std::vector<uint64_t> running_;
  std::deque<inflight_step> inflight_;
  std::unordered_map<uint64_t, int64_t> tombstones_;  // dropped before they arrived: id -> when
  std::map<std::string, std::unique_ptr<proposer>> proposers_;
  std::unordered_map<uint64_t, std::vector<int32_t>> batched_guesses_;  // propose_batched's, this plan()
  step_cost step_cost_;  // step wall time by tokens fed, for spec_pays
  // Guesses let into the step plan() is making (proposal_for rates a sequence's guesses on top of
  // them), and those that the sequences sitting it out for their sample mean to make in the next
  // (the same for a sequence deciding whether to sit it out): spec_pays's extra tokens.
  int32_t step_guesses_ = 0;
  int32_t next_step_guesses_ = 0;
  int32_t rule_refused_steps_ = 0;  // steps in which the cost rule refused a guess, since the last probe
  uint64_t last_refusal_step_ = 0;  // the plan that last counted in rule_refused_steps_
  uint64_t rule_probe_ = 0;         // the sequence to speculate next despite the rule (0: none)
  uint64_t model_try_step_ = 0;     // the plan in which a sequence tried an unmeasured draft
  std::vector<uint64_t> suspects_;  // in the order they are run alone
  uint64_t next_step_ = 1;
  int64_t last_answer_us_ = 0;  // when the executor's last answer came (steps run one after another)
  step_output out_;
  scheduler_stats st_;
};

}  // namespace troupe::actors

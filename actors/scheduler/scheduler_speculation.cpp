#include "actors/scheduler/scheduler_state.hpp"

// The scheduler's speculative decoding (issue 23): which sequences guess how many tokens in a
// step, and what an answered speculating step keeps. The rest of scheduler_state is in
// scheduler_state.cpp; the proposers are in speculative/.
#include <algorithm>
#include <cmath>

namespace troupe::actors {

result<proposer*> scheduler_state::proposer_of(const std::string& method) {
  auto it = proposers_.find(method);
  if (it == proposers_.end()) {
    auto made = proposer_registry().make(method, cfg_.speculative);
    if (!made) return make_error(made.error());
    it = proposers_.emplace(method, std::move(made.value())).first;
  }
  return it->second.get();
}

bool scheduler_state::may_try(const proposer& p) {
  if (!cfg_.speculative.cost_rule || !p.runs_model() || p.guess_cost_us(1) > 0) return true;  // measured, or no rule
  if (model_try_step_ == next_step_) return false;  // another sequence tries it in this step
  model_try_step_ = next_step_;
  return true;
}

bool scheduler_state::spec_allowed(const seq& s, int32_t n_running) const {
  const auto& c = cfg_.speculative;
  if (s.spec_method.empty() || policy_->pads_finished()) return false;  // a dense batch steps in lockstep
  if (c.max_batch > 0 && n_running > c.max_batch) return false;
  // Penalties, logit_bias and a constraint apply per verified position (the executor moves the
  // window and the matcher along the guesses), and logprobs are each kept position's own.
  return true;
}

bool scheduler_state::spec_wanted(const seq& s, int32_t n_running, int32_t extra) const {
  if (!spec_allowed(s, n_running)) return false;
  // Checked before its guess exists (a sequence that may speculate waits for its last sample):
  // with its k guesses; proposal_for checks again with the guess it got. The sequence chosen to
  // probe the rule (note_rule_refusal) is wanted whatever the rule says.
  return s.spec_skip > 0 || s.req.id == rule_probe_ || spec_pays(s, spec_k(s), n_running, extra);
}

void scheduler_state::note_rule_refusal(const seq& s) {
  // The rule's "no" rests on measured step times (the table's entry above the batch's token
  // count), and when nobody speculates nobody measures that entry again: one noisy measurement
  // would stop speculation for good. So after the rule has refused in probe_steps steps, the
  // sequence it refuses next speculates once anyway, and its step measures T(n + g) afresh (the
  // table's average moves a quarter of the way per measurement). One sequence per probe_steps
  // steps, not each: at batch 16, 16 probes would each cost a pipelined step and g positions.
  if (rule_probe_ != 0) return;  // one chosen already
  // Not a proposer that runs a model: the rule's "no" there rests mostly on its own forwards'
  // measured time, and a probe would pay them in full, with the draft's K/V catching up on every
  // token since its last guess (a self draft probed every 8 steps ran at half speed).
  if (auto pr = proposers_.find(s.spec_method); pr == proposers_.end() || pr->second->runs_model()) return;
  if (last_refusal_step_ != next_step_) {
    last_refusal_step_ = next_step_;
    ++rule_refused_steps_;
  }
  if (rule_refused_steps_ >= cfg_.speculative.probe_steps) {
    rule_probe_ = s.req.id;
    rule_refused_steps_ = 0;
    ++st_.spec_rule_probes;
  }
}

bool scheduler_state::spec_expects_guess(seq& s) {
  auto pr = proposer_of(s.spec_method);
  return pr && (*pr)->expects_guess(s.req.id, s.tokens);
}

int32_t scheduler_state::spec_k(const seq& s) const {
  // k follows the accepted run: as many guesses as it has been accepting lately, plus one. The
  // run is counted in the steps it was allowed, so a request that keeps all of them must be able
  // to show it would keep more: the +1 probes one further each step (k_eff, then k_eff + 1, ...
  // up to k while everything is kept), and a request whose guesses keep failing at the second
  // settles at 2 (a run of 1, plus the probe). Fewer guesses that fail cost verified positions
  // for nothing, and they dilute the acceptance rate that decides whether to speculate at all
  // (4 guesses of which 1 is kept read 25%, 2 of which 1 read 50%).
  const int32_t k = cfg_.speculative.k;
  if (s.spec_run < 0) return k;  // no step yet: the full k
  return std::clamp(static_cast<int32_t>(std::lround(s.spec_run)) + 1, 1, std::max(1, k));
}

bool scheduler_state::spec_pays(const seq& s, int32_t g, int32_t n_running, int32_t extra) const {
  if (!cfg_.speculative.cost_rule) return g > 0;
  const int32_t batch = std::max(1, n_running);
  // Decode batches feed one token per sequence; prompt chunks in the same step only make the
  // extra positions relatively cheaper, so this errs towards not speculating.
  // A proposer that runs a model (draft) adds its own forwards' time to the step.
  // (Not made yet: nothing measured, and its first guesses teach it.)
  const auto pr = proposers_.find(s.spec_method);
  const double guess_us = pr != proposers_.end() ? pr->second->guess_cost_us(g) : 0.0;
  // The step's tokens so far count the guesses already let into it (extra): the extra
  // positions' time is what they add on top of those. Measured steps are far from linear in the
  // tokens fed (on a 2-core AVX-512 machine 16 -> 20 tokens cost +0.37 ms a token, 16 -> 60 +0.93
  // ms), so rating each sequence's guesses against the plain batch let 11 of 16 speculate at
  // once into a step three times as long.
  return speculation_pays(step_cost_, s.spec_rate * g, g, batch, batch + std::max(0, extra),
                          cfg_.max_steps_in_flight > 1 && batch > 1, guess_us);
}

std::vector<int32_t> scheduler_state::proposal_for(seq& s, int32_t room, int32_t n_running) {
  if (!spec_allowed(s, n_running)) return {};
  if (s.spec_skip > 0) {
    --s.spec_skip;
    return {};
  }
  const bool probe = s.req.id == rule_probe_;
  if (!probe && !spec_pays(s, spec_k(s), n_running, step_guesses_)) {
    note_rule_refusal(s);
    return {};
  }
  // A plain decode: the last token is known and everything before it is in KV memory.
  if (s.pending_samples > 0 || s.n_computed != s.n_scheduled ||
      s.n_scheduled + 1 != static_cast<int32_t>(s.tokens.size()))
    return {};
  int32_t k = std::min(spec_k(s), room);
  k = std::min(k, s.req.max_tokens - s.generated - 1);  // the step yields at most k + 1 tokens
  if (geo_.max_positions > 0) k = std::min(k, geo_.max_positions - s.n_scheduled - 1);
  if (k <= 0) return {};
  auto pr = proposer_of(s.spec_method);
  if (!pr) return {};  // unregistered since (a reload): decode plainly
  std::vector<int32_t> guess;
  if (auto b = batched_guesses_.find(s.req.id); b != batched_guesses_.end()) {
    guess = std::move(b->second);
  } else {  // not gathered by propose_batched
    if (!may_try(**pr)) return {};
    guess = (*pr)->propose(s.req.id, s.tokens, k);
  }
  if (static_cast<int32_t>(guess.size()) > k) guess.resize(static_cast<size_t>(k));
  if (probe) {
    rule_probe_ = 0;  // tried, whether or not the proposer had a guess
  } else if (!guess.empty() && !spec_pays(s, static_cast<int32_t>(guess.size()), n_running, step_guesses_)) {
    guess.clear();
    note_rule_refusal(s);
  }
  if (guess.empty()) s.spec_let_pipeline = true;
  step_guesses_ += static_cast<int32_t>(guess.size());
  return guess;
}

void scheduler_state::propose_batched(uint64_t solo, int32_t n_running) {
  batched_guesses_.clear();
  // The sequences plan()'s loop will ask proposal_for about, by the same tests (read only: the
  // loop's own checks still decide). One left out here is asked alone (propose); one gathered
  // but then not scheduled (budget, preemption) only cost its proposer some work.
  std::map<proposer*, std::vector<proposal_request>> by_proposer;
  for (auto id : running_) {
    const auto& s = seqs_.at(id);
    if ((solo && id != solo) || s.pad || s.spec_inflight || s.paused || done_sampling(s) || s.spec_skip > 0) continue;
    if (s.pending_samples > 0 || s.n_computed != s.n_scheduled || s.n_scheduled + 1 != static_cast<int32_t>(s.tokens.size()))
      continue;
    if (!spec_wanted(s, n_running)) continue;
    // At most what proposal_for allows before the step's token budget (its guess is cut to that).
    int32_t k = std::min(spec_k(s), s.req.max_tokens - s.generated - 1);
    if (geo_.max_positions > 0) k = std::min(k, geo_.max_positions - s.n_scheduled - 1);
    if (k <= 0) continue;
    auto pr = proposer_of(s.spec_method);
    if (!pr) continue;
    if (!may_try(**pr)) continue;
    by_proposer[*pr].push_back({id, &s.tokens, s.n_prompt, k, {}});
  }
  for (auto& [p, reqs] : by_proposer) {
    p->propose_batch(reqs);
    for (auto& r : reqs) batched_guesses_[r.seq] = std::move(r.tokens);
  }
}

void scheduler_state::apply_speculation(seq& s, const inflight_entry& e, const sampled_token& t) {
  const uint64_t id = s.req.id;
  const bool kv_current = s.has_kv && e.kv_epoch == s.kv_epoch;
  s.spec_inflight = false;
  const auto accepted = static_cast<int32_t>(std::min<size_t>(t.more.size(), static_cast<size_t>(e.proposed)));
  s.spec_proposed += e.proposed;
  s.spec_accepted += accepted;
  st_.spec_proposed += e.proposed;
  st_.spec_accepted += accepted;
  const auto& c = cfg_.speculative;
  // Half weight on the newest step: guesses that all fail turn it off after four steps at the
  // default 0.1 (1, 0.5, 0.25, 0.125, 0.0625), after two at 0.3, where 0.7/0.3 weights took
  // longer, each step costing a pipelined one.
  s.spec_rate = 0.5 * s.spec_rate + 0.5 * static_cast<double>(accepted) / e.proposed;
  // The accepted run, with the same half weight (spec_k).
  // Its prior is k (what spec_k starts with): one rejected first guess must not drop k to 1 at
  // once, where the expected gain of a single guess rarely pays its verified position (the
  // measured rule) and the sequence would never be asked again.
  s.spec_run = 0.5 * (s.spec_run < 0 ? static_cast<double>(c.k) : s.spec_run) + 0.5 * accepted;
  if (s.spec_rate < c.min_acceptance) {
    // Back off, then probe: starting from the threshold, one good step turns it on again. A
    // probe that fails too backs off twice as long (up to 16x probe_steps).
    s.spec_skip = c.probe_steps << std::min(s.spec_backoffs, 4);
    s.spec_backoffs = std::min(s.spec_backoffs + 1, 4);
    s.spec_rate = c.min_acceptance;
  } else if (accepted > 0) {
    s.spec_backoffs = 0;
  }
  --s.pending_samples;
  bool alive = take_token(s, t.token, t.logprob, t.top);
  for (size_t j = 0; alive && j < static_cast<size_t>(accepted); ++j)
    alive = take_token(s, t.more[j], j < t.more_logprob.size() ? t.more_logprob[j] : 0.0f,
                       j < t.more_top.size() ? t.more_top[j] : std::vector<model::token_logprob>{});
  if (!alive || !seqs_.count(id)) return;
  if (kv_current) {
    // Positions past the accepted tokens hold rejected guesses: they are cut off before
    // anything (the prefix cache's commit below) can hash them, and their blocks freed.
    s.n_computed = s.n_scheduled = static_cast<int32_t>(s.tokens.size()) - 1;
    kv_.truncate(id, s.n_computed);
  }
}

}  // namespace troupe::actors

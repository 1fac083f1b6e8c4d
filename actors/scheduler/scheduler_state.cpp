#include "actors/scheduler/scheduler_state.hpp"

#include <algorithm>

namespace troupe::actors {

namespace {
constexpr int64_t tombstone_ttl_us = 60'000'000;
// Failed steps a sequence may be caught in before it fails without having failed alone: a fault
// that comes and goes must not keep a request (and the batch around it) retrying for ever.
constexpr int32_t max_step_faults = 3;

// The prompt the client sent: a continuation's `prompt` also holds the tokens generated on the
// replica that died (admitted_request::generated_before). The engine computes those positions in
// the decode order, as they were first computed (model::batch_sequence::n_prompt): in llama.cpp's
// order a prompt's attention sums in another order, and the continuation would not be the
// stream the client was reading.
int32_t prompt_of_request(const admitted_request& r) {
  return std::max(0, static_cast<int32_t>(r.prompt.size()) - r.generated_before);
}

template <class T>
void erase_value(std::vector<T>& v, const T& x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
}
}  // namespace

scheduler_state::scheduler_state(scheduler_config cfg, kv_geometry geo, std::unique_ptr<scheduling_policy> policy)
    : cfg_(std::move(cfg)),
      geo_(geo),
      policy_(std::move(policy)),
      kv_(geo.n_blocks, geo.block_size, cfg_.prefix_caching) {
  cfg_.max_batched_tokens = std::max(1, cfg_.max_batched_tokens);
  cfg_.max_num_seqs = std::max(1, cfg_.max_num_seqs);
  cfg_.max_steps_in_flight = std::max(1, cfg_.max_steps_in_flight);
  st_.policy = policy_->name();
}

void scheduler_state::enqueue(admitted_request r, int64_t now_us) {
  const uint64_t id = r.id;
  if (auto t = tombstones_.find(id); t != tombstones_.end()) {
    tombstones_.erase(t);
    ++st_.dropped;
    return;
  }
  if (seqs_.count(id)) {
    out_.failed.push_back({id, errc::internal, "request id " + std::to_string(id) + " is already scheduled"});
    return;
  }
  if (r.prompt.empty() || r.max_tokens <= 0) {
    out_.failed.push_back({id, errc::invalid_request, "a request needs a prompt and max_tokens >= 1"});
    ++st_.failed;
    return;
  }
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (blocks_for(total) > geo_.n_blocks) {
    out_.failed.push_back({id, errc::kv_capacity,
                           "prompt plus max_tokens (" + std::to_string(total) + " tokens) needs more KV memory than the " +
                               std::to_string(static_cast<int64_t>(geo_.n_blocks) * geo_.block_size) +
                               " token slots this executor has; lower max_tokens or raise kv memory"});
    ++st_.failed;
    return;
  }
  (void)now_us;
  seq s;
  s.spec_method = r.speculative.empty() ? cfg_.speculative.method : r.speculative;
  if (s.spec_method == "off") s.spec_method.clear();
  if (!s.spec_method.empty())
    if (auto p = proposer_of(s.spec_method); !p) {
      out_.failed.push_back({id, errc::invalid_request, "speculative: " + p.error() + "; or \"off\""});
      ++st_.failed;
      return;
    }
  s.tokens = r.prompt;
  s.n_prompt = static_cast<int32_t>(r.prompt.size());
  s.req = std::move(r);
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
}

void scheduler_state::drop(uint64_t id, int64_t now_us) {
  if (!seqs_.count(id)) {
    for (auto it = tombstones_.begin(); it != tombstones_.end();)
      it = now_us - it->second > tombstone_ttl_us ? tombstones_.erase(it) : std::next(it);
    tombstones_[id] = now_us;
    return;
  }
  ++st_.dropped;
  remove(id);
}

void scheduler_state::pause(uint64_t id) {
  if (auto it = seqs_.find(id); it != seqs_.end()) it->second.paused = true;
}

void scheduler_state::resume(uint64_t id) {
  if (auto it = seqs_.find(id); it != seqs_.end()) it->second.paused = false;
}

seq_view scheduler_state::view(const seq& s) const {
  seq_view v;
  v.id = s.req.id;
  v.arrival_us = s.req.arrival_us;
  v.priority = s.req.priority;
  v.prompt_tokens = s.n_prompt;
  v.generated = s.generated + s.pending_samples;
  v.max_tokens = s.req.max_tokens;
  v.to_compute = std::max(0, virtual_len(s) - s.n_scheduled);
  v.tenant = s.req.tenant;
  return v;
}

void scheduler_state::sort_by_policy(std::vector<uint64_t>& ids, int64_t now_us) const {
  std::vector<std::pair<seq_view, uint64_t>> v;
  v.reserve(ids.size());
  for (auto id : ids) v.emplace_back(view(seqs_.at(id)), id);
  std::stable_sort(v.begin(), v.end(),
                   [&](const auto& a, const auto& b) { return policy_->before(a.first, b.first, now_us); });
  for (size_t i = 0; i < v.size(); ++i) ids[i] = v[i].second;
}

step_entry scheduler_state::make_entry(seq& s, int32_t n, int64_t now_us) const {
  (void)now_us;
  step_entry e;
  e.seq_id = s.req.id;
  e.n_past = s.n_scheduled;
  e.n_prompt = prompt_of_request(s.req);
  const int32_t known = static_cast<int32_t>(s.tokens.size());
  const int32_t end = s.n_scheduled + n;
  const int32_t known_end = std::min(end, known);
  if (known_end > s.n_scheduled) e.tokens.assign(s.tokens.begin() + s.n_scheduled, s.tokens.begin() + known_end);
  // Positions past the known tokens can only be the one sample still in flight.
  e.feed_last_sample = end > known;
  e.block_table = kv_.block_table(s.req.id);
  e.sample = end == virtual_len(s);
  if (e.sample) {
    e.sampling = s.req.sampling;
    e.logprob = s.req.logprobs;
    e.n_generated = s.req.generated_before + s.generated + s.pending_samples;
    const auto& p = s.req.sampling;
    if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
      const auto keep = std::min<size_t>(s.tokens.size(), static_cast<size_t>(std::max(0, p.penalty_last_n)));
      e.recent.assign(s.tokens.end() - static_cast<long>(keep), s.tokens.end());
    }
    if (!s.req.constraint.empty()) {
      e.constraint = s.req.constraint;
      const auto known_generated = std::min<size_t>(s.tokens.size(), static_cast<size_t>(s.req.generated_before + s.generated));
      e.generated.assign(s.tokens.end() - static_cast<long>(known_generated), s.tokens.end());
      e.remaining = std::max<int32_t>(1, s.req.max_tokens - s.generated - s.pending_samples);
    }
  }
  return e;
}

void scheduler_state::unschedule(draft& d, uint64_t id) {
  if (!d.ids.erase(id)) return;
  auto it = std::find_if(d.entries.begin(), d.entries.end(), [&](const step_entry& e) { return e.seq_id == id; });
  if (it == d.entries.end()) return;
  d.budget += it->n_fed();
  d.entries.erase(it);
}

void scheduler_state::preempt(uint64_t id) {
  auto& s = seqs_.at(id);
  if (s.pad) {  // a finished member of a dense batch: nothing to recompute
    remove(id);
    return;
  }
  if (s.has_kv) kv_.free_sequence(id);
  s.has_kv = false;
  s.n_computed = s.n_scheduled = 0;
  ++s.kv_epoch;
  ++s.preemptions;
  ++st_.preemptions;
  if (s.ph == phase::running) {
    erase_value(running_, id);
    // Ahead of everything: the policy orders the queue anyway, but fcfs-like policies would put
    // it there too, and a preempted request has the most to lose.
    waiting_.insert(waiting_.begin(), id);
    s.ph = phase::waiting;
  }
}

// Padding of a dense batch (useless work), then a paused sequence (it makes no progress anyway).
// Only sequences not yet in this step's draft.
std::optional<uint64_t> scheduler_state::idle_victim(const draft& d, uint64_t for_id) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (*it != for_id && !d.ids.count(*it) && seqs_.at(*it).pad) return *it;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (*it != for_id && !d.ids.count(*it) && seqs_.at(*it).paused) return *it;
  return std::nullopt;
}

// An idle sequence (above), else the running sequence the policy serves last (not yet in this
// step's draft).
std::optional<uint64_t> scheduler_state::kv_victim(const draft& d, uint64_t for_id) const {
  if (auto v = idle_victim(d, for_id)) return v;
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (*it != for_id && !d.ids.count(*it)) return *it;
  return std::nullopt;
}

std::optional<uint64_t> scheduler_state::priority_victim(const seq& waiting, int64_t now_us) const {
  (void)now_us;
  const auto wv = view(waiting);
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (policy_->may_preempt(wv, view(seqs_.at(*it)))) return *it;
  return std::nullopt;
}

std::optional<step_plan> scheduler_state::plan(int64_t now_us) {
  if (!can_plan() || seqs_.empty()) return std::nullopt;
  expire(now_us);
  release_pads_if_batch_done();

  // Fault isolation: a suspect runs alone, with nothing else in flight, so that a failure of its
  // step is its own.
  const uint64_t solo = next_suspect();
  if (solo && !inflight_.empty()) return std::nullopt;

  draft d;
  d.budget = cfg_.max_batched_tokens;
  bool preempted = false;

  // 1. Running sequences keep going, in policy order; when KV blocks run out the sequences
  //    served last give theirs up.
  sort_by_policy(running_, now_us);
  batch_view bv;
  bv.max_num_seqs = batch_limit();
  bv.n_running = static_cast<int32_t>(running_.size());
  for (auto id : running_) {
    const auto& s = seqs_.at(id);
    bv.n_decoding += s.pad || s.generated > 0 ? 1 : 0;
  }
  bv.n_waiting = static_cast<int32_t>(waiting_.size());
  for (auto id : waiting_) bv.waited_us = std::max(bv.waited_us, now_us - seqs_.at(id).req.arrival_us);
  const auto order = running_;
  step_guesses_ = next_step_guesses_ = 0;
  propose_batched(solo, bv.n_running);
  for (auto id : order) {
    if (d.budget <= 0) break;
    auto& s = seqs_.at(id);
    if (s.ph != phase::running) continue;  // preempted above as a victim
    if (solo && id != solo) continue;
    if (s.pad || (done_sampling(s) && policy_->pads_finished())) {
      // Dense batch: a finished member (or one whose last sample is in flight) goes on being
      // computed, one position per step, while there is room; then it lets go of its slot.
      const bool room = geo_.max_positions <= 0 || s.n_scheduled < geo_.max_positions;
      if (!room || !kv_.reserve(id, s.n_scheduled + 1)) {
        // A finished member lets go; one whose last samples are still in flight must not
        // vanish before they arrive (they finish it), so it only skips this step.
        if (s.pad) remove(id);
        continue;
      }
      d.entries.push_back(make_pad_entry(s));
      d.ids.insert(id);
      d.pads.insert(id);
      d.budget -= 1;
      ++st_.pad_tokens;
      continue;
    }
    if (s.spec_inflight) continue;  // not pipelined: its length is known when the answer is in
    // A sequence that may speculate waits for its sample in flight (a guess needs the last token),
    // except for one step after a try found nothing to guess, while it backs off, and while its
    // proposer expects no guess (proposer::expects_guess): with others in the batch a wait costs
    // it a step the others take; alone, the executor idles for the scheduler's round trip, which
    // on a 2-core host where the backend's threads hold both cores is not small.
    if (s.pending_samples > 0 && s.spec_skip == 0 && !s.spec_let_pipeline &&
        spec_wanted(s, bv.n_running, next_step_guesses_) && spec_expects_guess(s)) {
      next_step_guesses_ += spec_k(s);  // what it means to guess in the next step
      continue;
    }
    const int32_t avail = virtual_len(s) - s.n_scheduled;
    if (s.paused || done_sampling(s) || avail <= 0) continue;
    const int32_t n = std::min(avail, d.budget);
    std::vector<int32_t> guess;
    if (avail == 1) guess = proposal_for(s, d.budget - 1, bv.n_running);
    const auto g = static_cast<int32_t>(guess.size());
    bool ok = kv_.reserve(id, s.n_scheduled + n + g);
    while (!ok) {
      auto victim = kv_victim(d, id);
      if (!victim) break;
      preempt(*victim);
      preempted = true;
      ok = kv_.reserve(id, s.n_scheduled + n + g);
    }
    if (!ok) {
      // Nobody left to take blocks from: this one waits (enqueue checked it fits alone).
      preempt(id);
      preempted = true;
      continue;
    }
    d.entries.push_back(make_entry(s, n, now_us));
    d.entries.back().proposal = std::move(guess);
    if (d.entries.back().feed_last_sample) s.spec_let_pipeline = false;
    d.ids.insert(id);
    d.budget -= n + g;
  }

  // 2. Waiting sequences join while the budget, the batch size and KV memory allow.
  if (!preempted && (solo || policy_->admits_new(bv))) {
    sort_by_policy(waiting_, now_us);
    const auto queue = waiting_;
    std::vector<int32_t> member_prompts;  // of running_, for policy_->admits()
    for (auto id : queue) {
      if (d.budget <= 0) break;
      auto& s = seqs_.at(id);
      // A preempted sequence whose last sample is still in flight waits for it, and a paused
      // one for its consumer.
      if (s.pending_samples > 0 || s.paused) continue;
      // A suspect joins no batch; it runs alone (above).
      if (solo ? id != solo : s.suspect) continue;
      if (member_prompts.size() != running_.size()) {  // first time, or a victim left the batch
        member_prompts.clear();
        for (auto r : running_) member_prompts.push_back(seqs_.at(r).n_prompt);
      }
      if (!solo && !policy_->admits(view(s), bv, member_prompts, now_us)) continue;
      if (static_cast<int32_t>(running_.size()) >= bv.max_num_seqs) {
        auto victim = solo ? kv_victim(d, id) : priority_victim(s, now_us);
        if (!victim) break;
        unschedule(d, *victim);
        preempt(*victim);
      }
      const int32_t cached = kv_.add_sequence(id, s.tokens, static_cast<int32_t>(s.req.prompt.size()));
      const int32_t n = std::min(virtual_len(s) - cached, d.budget);
      bool ok = kv_.reserve(id, cached + n);
      while (!ok) {
        // Paused sequences give their blocks up first: otherwise a stream whose consumer reads
        // (preempted above for memory) waits behind streams whose consumers do not, until those
        // are cut off as slow consumers.
        auto victim = idle_victim(d, id);
        if (!victim) victim = solo ? kv_victim(d, id) : priority_victim(s, now_us);
        if (!victim) break;
        unschedule(d, *victim);
        preempt(*victim);
        ok = kv_.reserve(id, cached + n);
      }
      if (!ok) {
        kv_.free_sequence(id);
        break;  // the head of the queue waits for memory; nobody jumps it
      }
      s.has_kv = true;
      s.n_computed = s.n_scheduled = cached;
      if (!s.started) {
        s.started = true;
        s.first_scheduled_us = now_us;
        s.cached_prompt = std::min(cached, s.n_prompt);
        st_.prompt_tokens += s.n_prompt;
        st_.prefix_hit_tokens += s.cached_prompt;
      }
      s.ph = phase::running;
      erase_value(waiting_, id);
      running_.push_back(id);
      member_prompts.push_back(s.n_prompt);
      d.entries.push_back(make_entry(s, n, now_us));
      d.ids.insert(id);
      d.budget -= n;
    }
  }

  if (d.entries.empty()) return std::nullopt;

  // 3. Commit the draft: from here on its tokens count as scheduled.
  step_plan p;
  p.step = next_step_++;
  inflight_step rec;
  rec.step = p.step;
  rec.planned_us = now_us;
  rec.solo = solo != 0;
  for (auto& e : d.entries) {
    auto& s = seqs_.at(e.seq_id);
    const int32_t n = e.n_fed();
    const bool pad = d.pads.count(e.seq_id) != 0;
    s.n_scheduled += n;
    if (e.sample && !pad) ++s.pending_samples;
    if (!e.proposal.empty()) s.spec_inflight = true;
    rec.entries.push_back({e.seq_id, s.kv_epoch, n, e.sample, pad, static_cast<int32_t>(e.proposal.size())});
  }
  p.entries = std::move(d.entries);
  inflight_.push_back(std::move(rec));

  ++st_.steps;
  st_.tokens_fed += p.n_tokens();
  const size_t n_seqs = p.entries.size();
  if (st_.batch_hist.size() <= n_seqs) st_.batch_hist.resize(n_seqs + 1, 0);
  ++st_.batch_hist[n_seqs];
  const auto u = kv_.usage();
  st_.kv_blocks_peak = std::max(st_.kv_blocks_peak, u.blocks_used);
  st_.kv_util_sum += u.blocks_total ? static_cast<double>(u.blocks_used) / u.blocks_total : 0.0;
  return p;
}

void scheduler_state::take_sample(seq& s, const sampled_token& t) {
  --s.pending_samples;
  take_token(s, t.token, t.logprob, t.top);
}

bool scheduler_state::take_token(seq& s, int32_t token, float logprob, std::vector<model::token_logprob> top) {
  ++st_.tokens_sampled;
  const auto& eog = s.req.eog;
  if (std::find(eog.begin(), eog.end(), token) != eog.end()) {
    finish(s.req.id, finish::stop);
    return false;
  }
  s.tokens.push_back(token);
  ++s.generated;
  out_.tokens.push_back({s.req.id, token, logprob, std::move(top), figures_of(s)});
  if (s.generated >= s.req.max_tokens) {
    finish(s.req.id, finish::length);
    return false;
  }
  return true;
}

void scheduler_state::apply(const step_result& r, int64_t now_us) {
  if (inflight_.empty() || inflight_.front().step != r.step) return;  // stale (executor was replaced)
  inflight_step rec = std::move(inflight_.front());
  inflight_.pop_front();
  const int64_t started_us = std::max(rec.planned_us, last_answer_us_);
  last_answer_us_ = now_us;
  st_.forward_us += r.forward_us;
  st_.sample_us += r.sample_us;

  if (!r.error.empty()) {
    step_failed(rec, "model step failed: " + r.error);
    return;
  }
  size_t k = 0;
  std::map<std::string, int32_t> tenant_fed;
  for (const auto& e : rec.entries) {
    const sampled_token* t = nullptr;
    if (e.sample) {
      if (k < r.samples.size() && r.samples[k].seq_id == e.id) t = &r.samples[k];
      ++k;
    }
    auto it = seqs_.find(e.id);
    if (it == seqs_.end()) continue;  // dropped or finished meanwhile
    auto& s = it->second;
    if (e.kv_epoch < s.discard_below_epoch) continue;  // planned before a fault it was caught in
    if (!e.pad) tenant_fed[s.req.tenant] += e.n_fed;
    const bool kv_current = s.has_kv && e.kv_epoch == s.kv_epoch;
    if (kv_current) s.n_computed += e.n_fed;
    if (e.sample && e.pad) {
      // Padding of a dense batch: computed and thrown away.
    } else if (e.sample && s.pad) {
      --s.pending_samples;  // its stream has ended meanwhile
    } else if (e.sample) {
      if (!t || t->token < 0) {
        fail(e.id, errc::executor_fault,
             t && !t->error.empty() ? t->error : "the executor's answer lacks a sample for this request");
        continue;
      }
      if (s.suspect && rec.solo) {  // it ran alone and sampled: cleared
        s.suspect = false;
        erase_value(suspects_, e.id);
      }
      if (s.req.deadline_us > 0 && now_us >= s.req.deadline_us) {
        // Sampled after the deadline: not delivered. One that has no token yet fails as one
        // still queued does (HTTP 504), whatever step its prompt's prefill ended in.
        --s.pending_samples;
        s.spec_inflight = false;
        expire_one(e.id);
        continue;
      }
      if (e.proposed > 0) apply_speculation(s, e, *t);
      else take_sample(s, *t);
      if (!seqs_.count(e.id)) continue;
    }
    // Padding wrote made-up tokens: such KV is never offered to the prefix cache.
    if (kv_current && !e.pad && !seqs_.at(e.id).pad) kv_.commit(e.id, s.tokens, s.n_computed);
  }
  release_pads_if_batch_done();
  {
    int32_t fed = 0;
    for (const auto& e : rec.entries) fed += e.n_fed;
    step_cost_.record(fed, now_us - started_us);
  }
  feed_back(rec, r, now_us - started_us, now_us, std::move(tenant_fed));
}

void scheduler_state::feed_back(const inflight_step& rec, const step_result& r, int64_t latency_us, int64_t now_us,
                                std::map<std::string, int32_t> tenant_tokens) {
  step_feedback f;
  f.tenant_tokens = std::move(tenant_tokens);
  f.now_us = now_us;
  f.latency_us = std::max<int64_t>(0, latency_us);
  f.forward_us = r.forward_us;
  f.n_seqs = static_cast<int32_t>(rec.entries.size());
  for (const auto& e : rec.entries) f.n_tokens += e.n_fed;
  f.n_running = static_cast<int32_t>(running_.size());
  f.n_waiting = static_cast<int32_t>(waiting_.size());
  f.max_num_seqs = cfg_.max_num_seqs;
  const int32_t total = kv_.usage().blocks_total;
  f.kv_free = total > 0 ? static_cast<double>(kv_.pool().available()) / total : 1.0;
  policy_->on_step(f);
}

void scheduler_state::reset_executor(const std::string& reason) {
  // The executor runs steps in order: the oldest step in flight is the one that failed; the
  // later ones never ran.
  std::optional<inflight_step> failed;
  if (!inflight_.empty()) failed = std::move(inflight_.front());
  inflight_.clear();
  std::vector<uint64_t> pads;
  for (const auto& [id, s] : seqs_)
    if (s.pad) pads.push_back(id);
  for (auto id : pads) remove(id);
  if (failed) step_failed(*failed, reason);
  // The new executor's KV memory holds nothing: forget every cached prefix as well.
  kv_ = model::kv_manager(geo_.n_blocks, geo_.block_size, cfg_.prefix_caching);
  for (auto& [id, s] : seqs_) {
    s.has_kv = false;
    requeue_for_recompute(s);
  }
}

void scheduler_state::requeue_for_recompute(seq& s) {
  const uint64_t id = s.req.id;
  if (s.has_kv) kv_.free_sequence(id);
  s.has_kv = false;
  s.n_computed = s.n_scheduled = 0;
  // Samples in flight will never come (or come from a step whose input was lost): the sequence
  // goes on from the tokens it has.
  s.pending_samples = 0;
  s.spec_inflight = false;
  ++s.kv_epoch;
  s.discard_below_epoch = s.kv_epoch;
  if (s.ph == phase::running) {
    erase_value(running_, id);
    waiting_.insert(waiting_.begin(), id);
    s.ph = phase::waiting;
  }
}

void scheduler_state::step_failed(const inflight_step& rec, const std::string& why) {
  std::vector<uint64_t> ids;
  for (const auto& e : rec.entries)
    if (!e.pad && seqs_.count(e.id) && !seqs_.at(e.id).pad) ids.push_back(e.id);
  for (const auto& e : rec.entries)  // padding of a dense batch: nothing to recompute
    if (e.pad || (seqs_.count(e.id) && seqs_.at(e.id).pad)) remove(e.id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (auto id : ids) {
    auto& s = seqs_.at(id);
    ++s.faults;
    if (ids.size() == 1 || s.faults >= max_step_faults) {
      // Alone in its step, it is the cause; or it has been in too many failed steps.
      fail(id, errc::executor_fault,
           ids.size() == 1 ? why : why + " (in " + std::to_string(s.faults) + " failed steps)");
      continue;
    }
    requeue_for_recompute(s);
    if (!s.suspect) {
      s.suspect = true;
      suspects_.push_back(id);
    }
  }
}

uint64_t scheduler_state::next_suspect() const {
  for (auto id : suspects_) {
    const auto& s = seqs_.at(id);
    // A paused suspect waits for its consumer; the others go meanwhile.
    if (!s.paused && s.pending_samples == 0) return id;
  }
  return 0;
}

void scheduler_state::fail_all(const std::string& code, const std::string& message) {
  std::vector<uint64_t> ids;
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (auto id : ids) seqs_.at(id).pad ? remove(id) : fail(id, code, message);
}

void scheduler_state::expire(int64_t now_us) {
  std::vector<uint64_t> late;
  for (const auto& [id, s] : seqs_)
    if (!s.pad && s.req.deadline_us > 0 && now_us >= s.req.deadline_us) late.push_back(id);
  std::sort(late.begin(), late.end());
  for (auto id : late) expire_one(id);
}

void scheduler_state::expire_one(uint64_t id) {
  const auto& s = seqs_.at(id);
  if (s.req.generated_before + s.generated > 0)
    finish(id, finish::deadline);
  else if (s.started)
    fail(id, errc::deadline, "the request's deadline passed during its prompt's prefill, before its first token");
  else
    fail(id, errc::deadline, "the request's deadline passed while it was queued");
}

seq_figures scheduler_state::figures_of(const seq& s) const {
  seq_figures f;
  f.usage.prompt_tokens = s.n_prompt - s.req.generated_before;
  f.usage.completion_tokens = s.req.generated_before + s.generated;
  f.usage.cached_prompt_tokens = s.cached_prompt;
  f.usage.speculative_proposed = s.spec_proposed;
  f.usage.speculative_accepted = s.spec_accepted;
  f.queue_ms = s.started ? static_cast<double>(s.first_scheduled_us - s.req.arrival_us) / 1000.0 : 0.0;
  f.preemptions = s.preemptions;
  return f;
}

void scheduler_state::finish(uint64_t id, const std::string& reason) {
  const auto& s = seqs_.at(id);
  const seq_figures fig = figures_of(s);
  seq_finished f;
  f.id = id;
  f.reason = reason;
  f.usage = fig.usage;
  f.queue_ms = fig.queue_ms;
  f.preemptions = fig.preemptions;
  out_.finished.push_back(std::move(f));
  ++st_.finished;
  if (policy_->pads_finished() && s.has_kv && s.ph == phase::running) {
    const bool others = std::any_of(running_.begin(), running_.end(),
                                    [&](uint64_t o) { return o != id && !seqs_.at(o).pad; });
    if (others) {
      seqs_.at(id).pad = true;
      return;
    }
  }
  remove(id);
}

void scheduler_state::release_pads_if_batch_done() {
  bool any_pad = false, any_real = false;
  for (auto id : running_) (seqs_.at(id).pad ? any_pad : any_real) = true;
  if (!any_pad || any_real) return;
  const auto pads = running_;
  for (auto id : pads) remove(id);
}

step_entry scheduler_state::make_pad_entry(const seq& s) const {
  step_entry e;
  e.seq_id = s.req.id;
  e.tokens = {s.tokens.back()};
  e.n_past = s.n_scheduled;
  e.n_prompt = prompt_of_request(s.req);
  e.block_table = kv_.block_table(s.req.id);
  e.sample = true;  // computed like any member; the sample is thrown away
  return e;
}

void scheduler_state::fail(uint64_t id, const std::string& code, const std::string& message) {
  out_.failed.push_back({id, code, message});
  ++st_.failed;
  remove(id);
}

void scheduler_state::reconfigure(scheduler_config cfg, std::unique_ptr<scheduling_policy> policy) {
  cfg.prefix_caching = cfg_.prefix_caching;
  if (!(cfg.speculative == cfg_.speculative)) proposers_.clear();  // made again with the new options
  cfg_ = std::move(cfg);
  policy_ = std::move(policy);
  st_.policy = policy_->name();
  if (!policy_->pads_finished()) {
    std::vector<uint64_t> pads;
    for (auto id : running_)
      if (seqs_.at(id).pad) pads.push_back(id);
    for (auto id : pads) remove(id);
  }
}

void scheduler_state::remove(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Every proposer hears of it: one that learns from recent outputs learns from all requests.
  for (auto& p : proposers_) p.second->on_end(id, it->second.tokens, it->second.n_prompt);
  if (it->second.has_kv) kv_.free_sequence(id);
  erase_value(it->second.ph == phase::running ? running_ : waiting_, id);
  if (it->second.suspect) erase_value(suspects_, id);
  if (rule_probe_ == id) rule_probe_ = 0;  // the next refusal chooses another
  seqs_.erase(it);
}

step_output scheduler_state::take_output() {
  step_output o;
  std::swap(o, out_);
  return o;
}

scheduler_stats scheduler_state::stats() const {
  scheduler_stats s = st_;
  s.waiting = static_cast<int32_t>(waiting_.size());
  s.running = static_cast<int32_t>(running_.size());
  s.paused = 0;
  for (const auto& [id, q] : seqs_) s.paused += q.paused ? 1 : 0;
  s.steps_in_flight = steps_in_flight();
  const auto u = kv_.usage();
  s.kv_blocks_total = u.blocks_total;
  s.kv_blocks_used = u.blocks_used;
  s.kv_blocks_cached = u.blocks_cached;
  s.kv_blocks_available = kv_.pool().available();
  s.max_num_seqs = batch_limit();
  return s;
}

}  // namespace troupe::actors

#include "actors/executor/executor_state.hpp"

#include <algorithm>
#include <chrono>

#include "model/cpu_ops.hpp"
#include "model/sampler.hpp"
#include "structured/mask_logits.hpp"

namespace troupe::actors {

namespace {
int64_t since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

executor_state::executor_state(std::unique_ptr<model::backend> be, std::shared_ptr<const text_codec> codec)
    : be_(std::move(be)), codec_(std::move(codec)) {
  if (codec_) eog_ = codec_->eog_tokens();
}

result<structured::matcher*> executor_state::matcher_for(const step_entry& e, int32_t fed_last, uint64_t step) {
  auto& c = constrained_[e.seq_id];
  c.last_step = step;
  if (c.m && c.spec == e.constraint && c.m->n_accepted() == e.n_generated) return c.m.get();
  c.m.reset();
  if (!codec_) return make_error("structured outputs need the model's vocabulary, and this executor has no text codec");
  auto compiled = codec_->compile_constraint(e.constraint);
  if (!compiled) return make_error("the structured-output constraint: " + compiled.error());
  auto m = std::make_unique<structured::matcher>(*compiled);
  std::vector<int32_t> tokens = e.generated;
  if (fed_last >= 0 && static_cast<int64_t>(tokens.size()) + 1 == e.n_generated) tokens.push_back(fed_last);
  if (static_cast<int64_t>(tokens.size()) != e.n_generated)
    return make_error("the constraint's matcher needs the " + std::to_string(e.n_generated) + " tokens generated so far, and the step carries " +
                      std::to_string(tokens.size()));
  for (auto t : tokens)
    if (!m->accept(t))
      return make_error("token " + std::to_string(t) + " generated earlier does not fit the structured-output constraint");
  c.spec = e.constraint;
  c.m = std::move(m);
  return c.m.get();
}

void executor_state::forget_idle_matchers(uint64_t step) {
  // A sequence that ended or was dropped is never named again; one merely paused is rebuilt from
  // its tokens when it comes back.
  constexpr uint64_t idle_steps = 256;
  for (auto it = constrained_.begin(); it != constrained_.end();) {
    if (it->second.last_step + idle_steps < step) it = constrained_.erase(it);
    else ++it;
  }
}

executor_info executor_state::info() const {
  executor_info i;
  i.backend = be_->name();
  i.n_blocks = be_->n_blocks();
  i.block_size = be_->block_size();
  i.n_vocab = be_->params().n_vocab;
  i.n_ctx = be_->params().n_ctx_train;
  return i;
}

step_result executor_state::run(const step_plan& plan) {
  step_result res;
  res.step = plan.step;
  model::batch b;
  b.seqs.reserve(plan.entries.size());
  // For each entry: its row in the batch (-1: left out because the token it refers to is missing).
  std::vector<int> row_of(plan.entries.size(), -1);
  std::vector<int32_t> fed_last(plan.entries.size(), -1);
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    model::batch_sequence s;
    s.seq_id = e.seq_id;
    s.tokens = e.tokens;
    if (e.feed_last_sample) {
      auto it = last_sample_.find(e.seq_id);
      if (it == last_sample_.end()) continue;  // the step it refers to failed
      s.tokens.push_back(it->second);
      fed_last[i] = it->second;
    }
    s.tokens.insert(s.tokens.end(), e.proposal.begin(), e.proposal.end());
    s.n_past = e.n_past;
    s.n_prompt = e.n_prompt;
    s.block_table = e.block_table;
    s.want_logits = e.sample;
    // A speculating entry: the logits at the last known token's position and at each proposed one.
    if (e.sample) s.n_logits = 1 + static_cast<int32_t>(e.proposal.size());
    row_of[i] = static_cast<int>(b.seqs.size());
    b.seqs.push_back(std::move(s));
  }
  last_sample_.clear();

  // Where the backend can sample every row itself (the cuda backend, on the device), only the
  // tokens come back: no logits cross to the host.
  std::vector<model::row_sampling> rows;
  bool in_backend = true;
  for (size_t i = 0; i < plan.entries.size() && in_backend; ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample || row_of[i] < 0) continue;
    in_backend = be_->can_sample(e.sampling) && e.constraint.empty() && e.proposal.empty();
    rows.push_back({e.sampling, e.n_generated});
  }
  if (in_backend && !rows.empty()) return run_sampled(plan, b, row_of, std::move(res), rows);

  const auto t0 = std::chrono::steady_clock::now();
  result<model::batch_logits> out = b.seqs.empty() ? result<model::batch_logits>(model::batch_logits{})
                                                          : be_->forward(b);
  res.forward_us = since_us(t0);
  if (!out) {
    res.error = out.error();
    return res;
  }

  const auto t1 = std::chrono::steady_clock::now();
  const int32_t n_vocab = out->n_vocab;
  // The rows to sample, then their samples: rows that cost more than an argmax (temperature,
  // penalties, logprobs) are spread over the backend's threads when there are two or more.
  struct row_job {
    size_t entry;
    const float* logits;
    model::sample_result sample;
    structured::matcher* m = nullptr;  // a constrained row's matcher
    std::string error;                 // the row could not be sampled
    int32_t pos = 0;                   // a speculating entry's j-th row: draw n_generated + j
  };
  std::vector<row_job> jobs;
  size_t logit_row = 0;
  int costly = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample || row_of[i] < 0) continue;
    jobs.push_back({i, out->row(logit_row++), {}, nullptr, {}, 0});
    costly += e.sampling.costly(e.logprob) || !e.constraint.empty() ? 1 : 0;
    if (!e.proposal.empty()) {
      // Every row is sampled on its own (each with its own draw) and compared afterwards: no
      // row's sample depends on another's, which holds without penalties or a constraint (their
      // state would move with each accepted token; the scheduler does not propose for them).
      if (!e.constraint.empty() || !e.recent.empty())
        jobs.back().error = "a speculative proposal for a sequence with a structured-output constraint or penalties";
      for (int32_t j = 1; j <= static_cast<int32_t>(e.proposal.size()); ++j) {
        jobs.push_back({i, out->row(logit_row++), {}, nullptr, {}, j});
        costly += e.sampling.costly(e.logprob) ? 1 : 0;
      }
      continue;
    }
    if (!e.constraint.empty()) {
      auto m = matcher_for(e, fed_last[i], plan.step);
      if (m) jobs.back().m = *m;
      else jobs.back().error = m.error();
    }
  }
  if (!constrained_.empty()) forget_idle_matchers(plan.step);
  // Plain greedy without a logprob asked skips the log-softmax over the whole vocabulary,
  // which costs more than the rest of a decode step's bookkeeping together.
  auto sample = [&](int64_t k) {
    auto& j = jobs[static_cast<size_t>(k)];
    const auto& e = plan.entries[j.entry];
    const std::vector<int32_t>* window = &e.recent;  // for penalties: with the token fed this step
    std::vector<int32_t> with_fed;
    if (fed_last[j.entry] >= 0 && !e.recent.empty()) {
      with_fed = e.recent;
      with_fed.push_back(fed_last[j.entry]);
      window = &with_fed;
    }
    if (!j.error.empty()) return;
    const float* logits = j.logits;
    thread_local std::vector<float> masked;
    if (j.m) {
      thread_local std::vector<uint64_t> bits;
      masked.assign(j.logits, j.logits + n_vocab);
      structured::mask_logits(*j.m, masked.data(), n_vocab, eog_, bits, e.remaining);
      logits = masked.data();
    }
    j.sample = model::sample_token(logits, n_vocab, e.sampling, *window, e.n_generated + j.pos, e.logprob);
    if (j.m && !j.m->accept(j.sample.token)) {
      const bool eog = std::find(eog_.begin(), eog_.end(), j.sample.token) != eog_.end();
      if (!eog)  // an end the grammar did not reach is still the end (the vocabulary could not go on)
        j.error = "the sampled token " + std::to_string(j.sample.token) + " does not fit the structured-output constraint";
    }
  };
  be_->sample_rows(static_cast<int64_t>(jobs.size()), costly, sample);
  size_t next_job = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample) continue;
    sampled_token t;
    t.seq_id = e.seq_id;
    if (row_of[i] < 0) {
      res.samples.push_back(std::move(t));  // token -1: the scheduler fails this sequence
      continue;
    }
    auto& job = jobs[next_job];
    next_job += 1 + e.proposal.size();
    if (!job.error.empty()) {
      t.error = job.error;
      constrained_.erase(e.seq_id);
      res.samples.push_back(std::move(t));  // token -1: the scheduler fails this sequence, naming why
      continue;
    }
    auto& s = job.sample;
    if (job.m && std::find(eog_.begin(), eog_.end(), s.token) != eog_.end()) constrained_.erase(e.seq_id);
    t.token = s.token;
    if (e.logprob || !e.sampling.plain_greedy()) t.logprob = s.logprob;
    t.top = std::move(s.top);
    // Speculation: each proposed token the model agrees with lets the next row's sample count.
    for (size_t j = 0; j < e.proposal.size() && (j == 0 ? t.token : t.more.back()) == e.proposal[j]; ++j) {
      const auto& next = jobs[next_job - e.proposal.size() + j].sample;
      t.more.push_back(next.token);
      if (e.logprob || !e.sampling.plain_greedy()) t.more_logprob.push_back(next.logprob);
    }
    last_sample_[e.seq_id] = t.more.empty() ? t.token : t.more.back();
    res.samples.push_back(std::move(t));
  }
  res.sample_us = since_us(t1);
  return res;
}

step_result executor_state::run_sampled(const step_plan& plan, const model::batch& b, const std::vector<int>& row_of,
                                        step_result res, const std::vector<model::row_sampling>& rows) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = be_->forward_sampled(b, rows);
  res.forward_us = since_us(t0);
  if (!out) {
    res.error = out.error();
    return res;
  }
  if (out->size() != rows.size()) {
    res.error = "backend sampled " + std::to_string(out->size()) + " rows of " + std::to_string(rows.size());
    return res;
  }
  size_t row = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample) continue;
    sampled_token t;
    t.seq_id = e.seq_id;
    if (row_of[i] >= 0) {
      const auto& s = (*out)[row++];
      t.token = s.token;
      t.logprob = s.logprob;
      last_sample_[e.seq_id] = t.token;
    }
    res.samples.push_back(std::move(t));  // token -1 (left out): the scheduler fails this sequence
  }
  return res;
}

}  // namespace troupe::actors

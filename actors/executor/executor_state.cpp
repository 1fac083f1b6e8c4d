#include "actors/executor/executor_state.hpp"

#include <algorithm>
#include <chrono>

#include "model/cpu_ops.hpp"
#include "model/sampler.hpp"

namespace troupe::actors {

namespace {
int64_t since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

executor_state::executor_state(std::unique_ptr<model::backend> be) : be_(std::move(be)) {}

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
    s.n_past = e.n_past;
    s.n_prompt = e.n_prompt;
    s.block_table = e.block_table;
    s.want_logits = e.sample;
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
    in_backend = be_->can_sample(e.sampling);
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
  };
  std::vector<row_job> jobs;
  size_t logit_row = 0;
  int costly = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample || row_of[i] < 0) continue;
    jobs.push_back({i, out->row(logit_row++), {}});
    costly += e.sampling.costly(e.logprob) ? 1 : 0;
  }
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
    j.sample = model::sample_token(j.logits, n_vocab, e.sampling, *window, e.n_generated, e.logprob);
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
    auto& s = jobs[next_job++].sample;
    t.token = s.token;
    if (e.logprob || !e.sampling.plain_greedy()) t.logprob = s.logprob;
    t.top = std::move(s.top);
    last_sample_[e.seq_id] = t.token;
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

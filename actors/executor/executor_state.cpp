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
  // Each sampling entry's rows: the position of its last known token, then one per proposed
  // token (a speculating entry, step_entry::proposal). Row j is sampled exactly as a step without
  // speculation would sample that position had proposal[0..j-1] been accepted: draw
  // n_generated + j, the penalty window with those tokens appended (sliding as the scheduler's
  // would), logit_bias as always, and with a constraint the matcher advanced through them and
  // `remaining` j fewer. Hence the kept prefix (up to the first row whose sample differs from the
  // guess, plus that sample) is token for token what decoding without speculation gives, greedy
  // or seeded; for a deterministic proposer that is the standard speculative-sampling rule (a
  // guess x is kept with probability p(x); on rejection the sample is from p without x).
  struct entry_rows {
    size_t first = 0;                          // its first row in `out`
    std::vector<model::sample_result> samples;  // by row; the first n_sampled are set
    int32_t n_sampled = 0;
    structured::matcher* m = nullptr;          // a constrained entry's matcher
    std::string error;                         // the entry could not be sampled
  };
  std::vector<entry_rows> rows_of(plan.entries.size());
  // Rows are sampled on the backend's threads where they cost more than an argmax (temperature,
  // penalties, logprobs). An unconstrained entry's rows do not depend on each other (each has its
  // own window and draw): one job per row. A constrained one's row j needs the matcher advanced
  // by row j-1's sample, which is only known once sampled: one job samples its rows in order and
  // stops at the first that differs from the guess (so the matcher accepts exactly the tokens
  // the step emits).
  struct row_job {
    size_t entry;
    int32_t pos;  // the entry's row (a constrained entry's job starts at 0 and goes on)
  };
  std::vector<row_job> jobs;
  size_t logit_row = 0;
  int costly = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample || row_of[i] < 0) continue;
    auto& r = rows_of[i];
    const auto n_rows = static_cast<int32_t>(1 + e.proposal.size());
    r.first = logit_row;
    logit_row += static_cast<size_t>(n_rows);
    r.samples.resize(static_cast<size_t>(n_rows));
    if (!e.constraint.empty()) {
      auto m = matcher_for(e, fed_last[i], plan.step);
      if (m) r.m = *m;
      else r.error = m.error();
      jobs.push_back({i, 0});
      ++costly;
      continue;
    }
    r.n_sampled = n_rows;
    for (int32_t j = 0; j < n_rows; ++j) {
      jobs.push_back({i, j});
      costly += e.sampling.costly(e.logprob) ? 1 : 0;
    }
  }
  if (!constrained_.empty()) forget_idle_matchers(plan.step);
  // One row: its window and mask as described above. Plain greedy without a logprob asked skips
  // the log-softmax over the whole vocabulary, which costs more than the rest of a decode step's
  // bookkeeping together.
  auto sample_row = [&](size_t i, int32_t pos) {
    const auto& e = plan.entries[i];
    auto& r = rows_of[i];
    thread_local std::vector<int32_t> window;  // for penalties: with the token fed this step and the guesses before
    window.clear();
    if (!e.recent.empty()) {
      window = e.recent;
      if (fed_last[i] >= 0) window.push_back(fed_last[i]);
      window.insert(window.end(), e.proposal.begin(), e.proposal.begin() + pos);
    }
    const float* logits = out->row(r.first + static_cast<size_t>(pos));
    thread_local std::vector<float> masked;
    if (r.m) {
      thread_local std::vector<uint64_t> bits;
      masked.assign(logits, logits + n_vocab);
      // remaining counts this token: the j-th guess's row has j fewer left (never below one,
      // like the scheduler's own count).
      const int32_t remaining = e.remaining > 0 ? std::max(1, e.remaining - pos) : 0;
      structured::mask_logits(*r.m, masked.data(), n_vocab, eog_, bits, remaining);
      logits = masked.data();
    }
    r.samples[static_cast<size_t>(pos)] =
        model::sample_token(logits, n_vocab, e.sampling, window, e.n_generated + pos, e.logprob);
  };
  auto sample = [&](int64_t k) {
    const auto& job = jobs[static_cast<size_t>(k)];
    auto& r = rows_of[job.entry];
    if (!r.error.empty()) return;
    if (!r.m) return sample_row(job.entry, job.pos);
    const auto& proposal = plan.entries[job.entry].proposal;
    for (int32_t pos = 0; pos < static_cast<int32_t>(r.samples.size()); ++pos) {
      sample_row(job.entry, pos);
      r.n_sampled = pos + 1;
      const int32_t token = r.samples[static_cast<size_t>(pos)].token;
      if (!r.m->accept(token)) {
        // An end the grammar did not reach is still the end (the vocabulary could not go on).
        if (std::find(eog_.begin(), eog_.end(), token) == eog_.end())
          r.error = "the sampled token " + std::to_string(token) + " does not fit the structured-output constraint";
        return;
      }
      if (static_cast<size_t>(pos) == proposal.size() || token != proposal[static_cast<size_t>(pos)]) return;
    }
  };
  be_->sample_rows(static_cast<int64_t>(jobs.size()), costly, sample);
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const auto& e = plan.entries[i];
    if (!e.sample) continue;
    sampled_token t;
    t.seq_id = e.seq_id;
    if (row_of[i] < 0) {
      res.samples.push_back(std::move(t));  // token -1: the scheduler fails this sequence
      continue;
    }
    auto& r = rows_of[i];
    if (!r.error.empty()) {
      t.error = r.error;
      constrained_.erase(e.seq_id);
      res.samples.push_back(std::move(t));  // token -1: the scheduler fails this sequence, naming why
      continue;
    }
    const bool want_logprob = e.logprob || !e.sampling.plain_greedy();
    auto& s = r.samples[0];
    t.token = s.token;
    if (want_logprob) t.logprob = s.logprob;
    t.top = std::move(s.top);
    // Speculation: each proposed token the model agrees with lets the next row's sample count.
    for (size_t j = 0; j < e.proposal.size() && static_cast<int32_t>(j) + 1 < r.n_sampled &&
                       r.samples[j].token == e.proposal[j];
         ++j) {
      t.more.push_back(r.samples[j + 1].token);
      if (want_logprob) t.more_logprob.push_back(r.samples[j + 1].logprob);
      if (e.logprob) t.more_top.push_back(std::move(r.samples[j + 1].top));
    }
    const int32_t last = t.more.empty() ? t.token : t.more.back();
    if (r.m && std::find(eog_.begin(), eog_.end(), last) != eog_.end()) constrained_.erase(e.seq_id);
    last_sample_[e.seq_id] = last;
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

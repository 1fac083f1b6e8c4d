#include "model/batch_generator.hpp"

#include <algorithm>
#include <chrono>

namespace troupe::model {

namespace {
using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct live_seq {
  size_t index;
  std::vector<int32_t> all;   // prompt + generated
  int32_t n_computed = 0;     // tokens whose KV is written
  bool done = false;
};
}  // namespace

batch_generator::batch_generator(backend& be, int32_t max_batched_tokens, bool prefix_caching)
    : be_(be), max_batched_tokens_(std::max(1, max_batched_tokens)), prefix_caching_(prefix_caching) {}

std::vector<generation_output> batch_generator::run(const std::vector<generation_request>& reqs,
                                                    generation_stats* stats,
                                                    const std::function<void(size_t, int32_t)>& on_token,
                                                    bool keep_logits) {
  std::vector<generation_output> out(reqs.size());
  kv_manager kv(be_.n_blocks(), be_.block_size(), prefix_caching_);
  generation_stats st;
  const int32_t n_ctx = be_.params().n_ctx_train;
  std::vector<live_seq> seqs;

  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    if (r.prompt.empty()) {
      out[i].error = "empty prompt";
      continue;
    }
    if (auto s = r.sampling.validate(); !s) {
      out[i].error = s.error();
      continue;
    }
    if (static_cast<int64_t>(r.prompt.size()) + r.max_tokens > n_ctx) {
      out[i].error = "prompt (" + std::to_string(r.prompt.size()) + " tokens) plus max_tokens (" +
                     std::to_string(r.max_tokens) + ") exceeds the model context of " + std::to_string(n_ctx);
      continue;
    }
    live_seq s{i, r.prompt, 0, false};
    s.n_computed = kv.add_sequence(i, r.prompt);
    if (!kv.reserve(i, static_cast<int32_t>(r.prompt.size()) + r.max_tokens)) {
      kv.free_sequence(i);
      out[i].error = "not enough KV memory for this request";
      continue;
    }
    st.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    seqs.push_back(std::move(s));
  }
  auto note_peak = [&] {
    auto u = kv.usage();
    if (u.blocks_used > st.peak_kv.blocks_used) st.peak_kv = u;
  };
  note_peak();

  auto finish = [&](live_seq& s, const std::string& reason) {
    s.done = true;
    out[s.index].finish_reason = reason;
    kv.free_sequence(s.index);
  };
  auto take = [&](live_seq& s, const float* logits, sample_result res) {
    const auto& r = reqs[s.index];
    auto& o = out[s.index];
    if (keep_logits) o.logits.emplace_back(logits, logits + be_.params().n_vocab);
    if (std::find(r.stop_ids.begin(), r.stop_ids.end(), res.token) != r.stop_ids.end()) {
      finish(s, "stop");
      return;
    }
    o.tokens.push_back(res.token);
    o.samples.push_back(std::move(res));
    s.all.push_back(o.tokens.back());
    if (on_token) on_token(s.index, o.tokens.back());
    if (static_cast<int32_t>(o.tokens.size()) >= r.max_tokens) finish(s, "length");
  };
  // Samples a step's rows (costly ones spread over the backend's threads), then takes them in order.
  auto take_rows = [&](const std::vector<std::pair<live_seq*, const float*>>& rows) {
    std::vector<sample_result> got(rows.size());
    int costly = 0;
    for (const auto& [s, logits] : rows)
      costly += reqs[s->index].sampling.costly(reqs[s->index].logprobs) || reqs[s->index].shape_logits ? 1 : 0;
    auto sample = [&](int64_t k) {
      const live_seq& s = *rows[static_cast<size_t>(k)].first;
      const auto& r = reqs[s.index];
      const int32_t n_vocab = be_.params().n_vocab;
      const float* logits = rows[static_cast<size_t>(k)].second;
      std::vector<float> shaped;
      if (r.shape_logits) {
        shaped.assign(logits, logits + n_vocab);
        r.shape_logits(shaped);
        logits = shaped.data();
      }
      got[static_cast<size_t>(k)] = sample_token(logits, n_vocab, r.sampling, s.all,
                                                 static_cast<int64_t>(out[s.index].tokens.size()), r.logprobs);
    };
    be_.sample_rows(static_cast<int64_t>(rows.size()), costly, sample);
    for (size_t k = 0; k < rows.size(); ++k) take(*rows[k].first, rows[k].second, std::move(got[k]));
  };
  auto fail_all = [&](const std::string& why) {
    for (auto& s : seqs)
      if (!s.done) {
        out[s.index].error = why;
        finish(s, "error");
      }
  };

  // Prefill: chunks of the prompts under the token budget; the last chunk of a prompt samples.
  auto t0 = clock_type::now();
  bool prefilling = true;
  while (prefilling) {
    prefilling = false;
    batch b;
    int32_t budget = max_batched_tokens_;
    std::vector<live_seq*> in_step;
    for (auto& s : seqs) {
      const auto prompt_len = static_cast<int32_t>(reqs[s.index].prompt.size());
      if (s.done || s.n_computed >= prompt_len || budget == 0) continue;
      const int32_t n = std::min(budget, prompt_len - s.n_computed);
      batch_sequence bs;
      bs.seq_id = s.index;
      bs.n_past = s.n_computed;
      bs.tokens.assign(s.all.begin() + s.n_computed, s.all.begin() + s.n_computed + n);
      bs.block_table = kv.block_table(s.index);
      bs.want_logits = s.n_computed + n == prompt_len;
      bs.n_prompt = prompt_len;
      b.seqs.push_back(std::move(bs));
      in_step.push_back(&s);
      budget -= n;
    }
    if (b.seqs.empty()) break;
    prefilling = true;
    auto res = be_.forward(b);
    if (!res) {
      fail_all(res.error());
      break;
    }
    size_t row = 0;
    std::vector<std::pair<live_seq*, const float*>> rows;
    for (size_t k = 0; k < in_step.size(); ++k) {
      auto& s = *in_step[k];
      s.n_computed += static_cast<int32_t>(b.seqs[k].tokens.size());
      kv.commit(s.index, s.all, s.n_computed);
      if (b.seqs[k].want_logits) rows.emplace_back(&s, res->row(row++));
    }
    take_rows(rows);
  }
  st.prefill_seconds = seconds_since(t0);

  // Decode: every live sequence advances one token per step.
  t0 = clock_type::now();
  for (;;) {
    batch b;
    std::vector<live_seq*> in_step;
    for (auto& s : seqs) {
      if (s.done) continue;
      batch_sequence bs;
      bs.seq_id = s.index;
      bs.n_past = s.n_computed;
      bs.tokens = {s.all.back()};
      bs.n_prompt = static_cast<int32_t>(reqs[s.index].prompt.size());
      bs.block_table = kv.block_table(s.index);
      b.seqs.push_back(std::move(bs));
      in_step.push_back(&s);
    }
    if (b.seqs.empty()) break;
    auto res = be_.forward(b);
    if (!res) {
      fail_all(res.error());
      break;
    }
    ++st.decode_steps;
    note_peak();
    std::vector<std::pair<live_seq*, const float*>> rows;
    for (size_t k = 0; k < in_step.size(); ++k) {
      in_step[k]->n_computed += 1;
      rows.emplace_back(in_step[k], res->row(k));
    }
    take_rows(rows);
  }
  st.decode_seconds = seconds_since(t0);
  for (const auto& o : out) st.generated_tokens += static_cast<int64_t>(o.tokens.size());
  if (stats) *stats = st;
  return out;
}

}  // namespace troupe::model

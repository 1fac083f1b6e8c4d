#include "actors/scheduler/speculative/draft.hpp"

#include <algorithm>
#include <chrono>

#include "model/cpu_ops.hpp"

namespace troupe::actors::proposers {

namespace {

// Tokens fed in one prefill forward, all sequences together: catching up on a new sequence's
// prompt shares the forward of the first guessed position with the others' one-token catch-ups,
// up to this many tokens (longer prompts take more forwards).
constexpr int32_t prefill_budget = 2048;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

status check_draft_vocabulary(const model::gguf_file& target, const model::gguf_file& draft) {
  const std::string key = "tokenizer.ggml.tokens";
  auto t = target.get_string_array(key);
  auto d = draft.get_string_array(key);
  if (!d) return make_error(draft.path() + " has no vocabulary: " + d.error());
  if (!t) return make_error("the model " + target.path() + " has no vocabulary to compare: " + t.error());
  if (t->size() != d->size())
    return make_error(draft.path() + " has a vocabulary of " + std::to_string(d->size()) +
                      " tokens, the model " + target.path() + " one of " + std::to_string(t->size()) +
                      ": a draft must use the model's vocabulary");
  for (size_t i = 0; i < t->size(); ++i)
    if ((*t)[i] != (*d)[i])
      return make_error(draft.path() + " differs from the model " + target.path() +
                        " in its vocabulary at token " + std::to_string(i) + " (" + quoted((*d)[i]) + " against " +
                        quoted((*t)[i]) + "): a draft must use the model's vocabulary");
  return {};
}

status check_draft_model(const std::string& draft_path, const std::string& target_path) {
  auto d = model::gguf_file::open(draft_path);
  if (!d) return make_error("cannot open " + draft_path + ": " + d.error());
  auto t = model::gguf_file::open(target_path);
  if (!t) return {};
  return check_draft_vocabulary(*t.value(), *d.value());
}

draft_proposer::draft_proposer(std::shared_ptr<model::llama_model> m, std::unique_ptr<model::backend> be)
    : m_(std::move(m)),
      be_(std::move(be)),
      // Prefix caching: requests that share a system prompt share its draft K/V too.
      kv_(be_->n_blocks(), be_->block_size(), true),
      n_vocab_(be_->params().n_vocab),
      max_positions_(be_->params().n_ctx_train) {}

result<std::unique_ptr<draft_proposer>> draft_proposer::make(std::shared_ptr<model::llama_model> m,
                                                             const speculative_config& c) {
  model::backend_options bo;
  bo.n_threads = c.draft_threads;
  bo.kv_bytes = c.draft_kv_bytes;
  // The cpu backend, whatever the model's: the draft is small and runs while the model's
  // backend waits for its guesses.
  auto be = model::make_backend("cpu", m, bo);
  if (!be) return make_error("speculative.draft_model: " + be.error());
  if (be.value()->n_blocks() < 1) return make_error("speculative.draft_kv_mib holds no KV block of the draft model");
  return std::unique_ptr<draft_proposer>(new draft_proposer(std::move(m), std::move(be.value())));
}

std::vector<int32_t> draft_proposer::propose(uint64_t seq, const std::vector<int32_t>& context, int32_t max_k) {
  std::vector<proposal_request> one{{seq, &context, 0, max_k, {}}};
  propose_batch(one);
  return std::move(one[0].tokens);
}

void draft_proposer::on_end(uint64_t seq, const std::vector<int32_t>&, int32_t) { forget(seq); }

void draft_proposer::forget(uint64_t seq) {
  kv_.free_sequence(seq);
  seqs_.erase(seq);
}

void draft_proposer::keep(uint64_t seq, seq_state& s, int32_t n) {
  if (static_cast<int32_t>(s.cached.size()) > n) s.cached.resize(static_cast<size_t>(n));
  kv_.truncate(seq, static_cast<int32_t>(s.cached.size()));  // also slots reserved but never fed
}

bool draft_proposer::make_room(uint64_t seq, int32_t n, const std::vector<uint64_t>& busy) {
  while (!kv_.reserve(seq, n)) {
    // The idle sequence used least recently gives its draft K/V up; it catches up when it next
    // speculates.
    uint64_t victim = 0;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [id, st] : seqs_)
      if (id != seq && st.last_used < oldest && std::find(busy.begin(), busy.end(), id) == busy.end()) {
        oldest = st.last_used;
        victim = id;
      }
    if (oldest == UINT64_MAX) return false;
    forget(victim);
  }
  return true;
}

std::vector<int32_t> draft_proposer::forward_argmax(const model::batch& b) {
  ++forwards_;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = be_->forward(b);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  forward_us_ = forward_us_ == 0 ? us : 0.75 * forward_us_ + 0.25 * us;  // as step_cost weighs a new step
  if (!r) return {};
  std::vector<int32_t> out;
  out.reserve(r->seq_ids.size());
  for (size_t i = 0; i < r->seq_ids.size(); ++i) out.push_back(static_cast<int32_t>(model::argmax(r->row(i), r->n_vocab)));
  return out;
}

void draft_proposer::propose_batch(std::vector<proposal_request>& reqs) {
  ++calls_;
  std::vector<uint64_t> busy;
  for (const auto& r : reqs) busy.push_back(r.seq);

  // 1. Each sequence's draft K/V agrees with its context up to the common prefix; the rest
  //    (rejected guesses) is cut off, and room is made for the context and k - 1 guesses.
  struct live {
    proposal_request* r;
    int32_t fed = 0;   // of the context, tokens whose K/V the draft holds
    int32_t k = 0;
  };
  std::vector<live> go;
  for (auto& r : reqs) {
    r.tokens.clear();
    const auto& ctx = *r.context;
    const auto n = static_cast<int32_t>(ctx.size());
    // The last guess is never fed: k guesses need n + k - 1 positions.
    const int32_t k = std::min(r.max_k, max_positions_ - n + 1);
    if (n == 0 || k <= 0) continue;
    // A token the draft cannot read (the config checks the vocabularies; this keeps a draft
    // that slipped past them from failing a step): no guess.
    if (std::any_of(ctx.begin(), ctx.end(), [&](int32_t t) { return t < 0 || t >= n_vocab_; })) continue;
    auto& s = seqs_[r.seq];
    s.last_used = calls_;
    if (!kv_.has_sequence(r.seq)) {
      const int32_t cached = kv_.add_sequence(r.seq, ctx, r.n_prompt);
      s.cached.assign(ctx.begin(), ctx.begin() + cached);
    }
    const auto m = static_cast<int32_t>(std::mismatch(s.cached.begin(), s.cached.end(), ctx.begin(), ctx.end()).first -
                                        s.cached.begin());
    keep(r.seq, s, std::min(m, n - 1));  // at least the last token is fed: its logits give guess 1
    if (!make_room(r.seq, n + k - 1, busy)) {
      forget(r.seq);  // no room even alone: nothing held, nothing guessed this step
      continue;
    }
    go.push_back({&r, static_cast<int32_t>(s.cached.size()), k});
  }
  if (go.empty()) return;

  // 2. Catch up: the missing context of every sequence, in forwards of up to prefill_budget
  //    tokens; a sequence's last chunk gives its first guess.
  std::vector<size_t> pending(go.size());
  for (size_t i = 0; i < go.size(); ++i) pending[i] = i;
  bool failed = false;
  while (!pending.empty() && !failed) {
    model::batch b;
    std::vector<size_t> in_batch, finishing;
    int32_t budget = prefill_budget;
    for (size_t i : pending) {
      auto& g = go[i];
      const auto& ctx = *g.r->context;
      const int32_t left = static_cast<int32_t>(ctx.size()) - g.fed;
      if (budget <= 0) break;
      const int32_t take = std::min(left, budget);
      model::batch_sequence bs;
      bs.seq_id = g.r->seq;
      bs.tokens.assign(ctx.begin() + g.fed, ctx.begin() + g.fed + take);
      bs.n_past = g.fed;
      bs.block_table = kv_.block_table(g.r->seq);
      bs.n_prompt = g.r->n_prompt;
      bs.want_logits = take == left;
      budget -= take;
      b.seqs.push_back(std::move(bs));
      in_batch.push_back(i);
      if (take == left) finishing.push_back(i);
    }
    for (const auto& bs : b.seqs) fed_tokens_ += static_cast<int64_t>(bs.tokens.size());
    auto rows = forward_argmax(b);
    if (rows.size() != finishing.size()) {
      failed = true;
      break;
    }
    for (size_t j = 0; j < in_batch.size(); ++j) {
      auto& g = go[in_batch[j]];
      const auto& bs = b.seqs[j];
      auto& s = seqs_.at(g.r->seq);
      s.cached.insert(s.cached.end(), bs.tokens.begin(), bs.tokens.end());
      kv_.commit(g.r->seq, s.cached, static_cast<int32_t>(s.cached.size()));
      g.fed += static_cast<int32_t>(bs.tokens.size());
    }
    for (size_t j = 0; j < finishing.size(); ++j) go[finishing[j]].r->tokens.push_back(rows[j]);
    std::vector<size_t> still;
    for (size_t i : pending)
      if (go[i].fed < static_cast<int32_t>(go[i].r->context->size())) still.push_back(i);
    pending.swap(still);
  }

  // 3. Decode: one forward per further guessed position, for every sequence still guessing.
  for (int32_t pos = 1; !failed; ++pos) {
    model::batch b;
    std::vector<size_t> in_batch;
    for (size_t i = 0; i < go.size(); ++i) {
      auto& g = go[i];
      if (g.k <= pos || g.r->tokens.empty()) continue;
      const auto& s = seqs_.at(g.r->seq);
      model::batch_sequence bs;
      bs.seq_id = g.r->seq;
      bs.tokens = {g.r->tokens.back()};
      bs.n_past = static_cast<int32_t>(s.cached.size());
      bs.block_table = kv_.block_table(g.r->seq);
      bs.n_prompt = g.r->n_prompt;
      b.seqs.push_back(std::move(bs));
      in_batch.push_back(i);
    }
    if (b.seqs.empty()) break;
    auto rows = forward_argmax(b);
    if (rows.size() != in_batch.size()) {
      failed = true;
      break;
    }
    for (size_t j = 0; j < in_batch.size(); ++j) {
      auto& g = go[in_batch[j]];
      // Not committed: a block holding guesses may be cut back and rewritten, so only context
      // blocks (which only grow) are ever hashed and shared.
      seqs_.at(g.r->seq).cached.push_back(g.r->tokens.back());
      g.r->tokens.push_back(rows[j]);
    }
  }
  if (failed) {
    // The backend refused a step (it validates every batch): guess nothing, and start these
    // sequences' draft K/V afresh next time rather than trust what it holds.
    for (auto& g : go) {
      g.r->tokens.clear();
      forget(g.r->seq);
    }
  }
}

void add_draft(named_registry<proposer_factory>& r) {
  (void)r.add("draft", [](const speculative_config& c) -> result<std::unique_ptr<proposer>> {
    if (c.draft_model.empty())
      return make_error("speculative.draft_model is not set (the draft method needs a GGUF model with the model's vocabulary)");
    auto m = model::llama_model::load(c.draft_model);
    if (!m) return make_error("speculative.draft_model: cannot load " + c.draft_model + ": " + m.error());
    auto p = draft_proposer::make(m.value(), c);
    if (!p) return make_error(p.error());
    return std::unique_ptr<proposer>(std::move(p.value()));
  });
}

}  // namespace troupe::actors::proposers

// The draft proposer on synthetic models (random weights, the synthetic byte-level vocabulary):
// its guesses are the draft's own greedy decode, batching does not change them and costs one
// forward per guessed position, its KV memory is bounded and all free once the sequences end,
// and a missing or mismatched draft_model is a config error naming the key. Through the
// scheduler and executor, greedy outputs are identical to decoding without speculation, with a
// draft that is the model itself (acceptance near 100%) and with another, smaller one (often
// wrong). The real model's run is draft_real_model_test.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "actors/executor/executor_state.hpp"
#include "actors/scheduler/scheduler_state.hpp"
#include "actors/scheduler/speculative/draft.hpp"
#include "config/config_loader.hpp"
#include "model/cpu_ops.hpp"
#include "tests/support/synthetic_model.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::actors;
using proposers::draft_proposer;

namespace {

std::shared_ptr<model::llama_model> synthetic(uint32_t seed, int n_layer = 2, int n_embd = 256, bool tied = true) {
  test::synthetic_options o;
  o.seed = seed;
  o.n_layer = n_layer;
  o.n_embd = n_embd;
  o.tied_output = tied;
  auto m = model::llama_model::load(test::make_synthetic_file(o));
  EXPECT_TRUE(m.ok()) << m.error();
  return m.value();
}

// The target: the draft's guesses are checked against it.
std::shared_ptr<model::llama_model> target() {
  static auto m = synthetic(42);
  return m;
}
// Another model of the same vocabulary: one layer, smaller, other weights, and its own output
// head (random models with a tied head mostly repeat their input token, and would agree).
std::shared_ptr<model::llama_model> small() {
  static auto m = synthetic(7, 1, 128, false);
  return m;
}

std::unique_ptr<draft_proposer> make_draft(std::shared_ptr<model::llama_model> m, int64_t kv_bytes = 8ll << 20) {
  speculative_config c;
  c.draft_threads = 2;
  c.draft_kv_bytes = kv_bytes;
  auto d = draft_proposer::make(std::move(m), c);
  EXPECT_TRUE(d.ok()) << d.error();
  return std::move(d.value());
}

// Greedy decode of n tokens after `ctx` with a fresh backend: what a draft of this model guesses.
std::vector<int32_t> greedy(std::shared_ptr<model::llama_model> m, std::vector<int32_t> ctx, int n) {
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 8ll << 20;
  auto be = model::make_backend("cpu", m, bo).value();
  std::vector<int32_t> table;
  for (int32_t b = 0; b < be->n_blocks(); ++b) table.push_back(b);
  std::vector<int32_t> out;
  int32_t past = 0;
  std::vector<int32_t> feed = ctx;
  for (int i = 0; i < n; ++i) {
    model::batch b;
    b.seqs.push_back({1, feed, past, table, true, 1, 0});
    auto r = be->forward(b);
    EXPECT_TRUE(r.ok()) << r.error();
    past += static_cast<int32_t>(feed.size());
    out.push_back(static_cast<int32_t>(model::argmax(r->row(0), r->n_vocab)));
    feed = {out.back()};
  }
  return out;
}

std::vector<int32_t> context(uint32_t seed, int n) {
  std::vector<int32_t> c;
  for (int i = 0; i < n; ++i) c.push_back(static_cast<int32_t>((seed * 31 + static_cast<uint32_t>(i) * 17) % 250 + 3));
  return c;
}

}  // namespace

TEST(draft, guesses_are_the_drafts_greedy_decode_and_follow_the_context) {
  auto d = make_draft(target());
  EXPECT_EQ(d->name(), "draft");
  auto ctx = context(1, 20);
  const auto want = greedy(target(), ctx, 6);
  EXPECT_EQ(d->propose(1, ctx, 4), std::vector<int32_t>(want.begin(), want.begin() + 4));
  // Two guesses accepted and the model's own next token: the draft keeps its K/V up to the
  // accepted ones, catches up and guesses again.
  ctx.insert(ctx.end(), want.begin(), want.begin() + 3);
  const auto next = greedy(target(), ctx, 3);
  EXPECT_EQ(d->propose(1, ctx, 3), next);
  // The guesses rejected: a context that differs from what the draft fed (a wrong token after
  // the first guess) is cut back to the common prefix.
  ctx.resize(21);
  ctx.push_back(want[1] == 5 ? 6 : 5);
  EXPECT_EQ(d->propose(1, ctx, 2), greedy(target(), ctx, 2));
  EXPECT_TRUE(d->propose(1, ctx, 0).empty());
  EXPECT_TRUE(d->propose(2, {}, 4).empty());
  // A token outside the draft's vocabulary: no guess, no failed step.
  EXPECT_TRUE(d->propose(3, {1, 2, 1 << 20}, 4).empty());
}

TEST(draft, a_batch_costs_one_forward_per_guessed_position_and_guesses_as_alone) {
  auto d = make_draft(target());
  std::vector<std::vector<int32_t>> ctx = {context(1, 9), context(2, 23), context(3, 40)};
  std::vector<proposal_request> reqs;
  for (size_t i = 0; i < ctx.size(); ++i) reqs.push_back({i + 1, &ctx[i], 0, 4, {}});  // n_prompt 0: decode order, like greedy()
  d->propose_batch(reqs);
  // The three prompts and the first guesses in one forward, then one per further position.
  EXPECT_EQ(d->forwards(), 4);
  for (size_t i = 0; i < ctx.size(); ++i) {
    auto alone = make_draft(target());
    EXPECT_EQ(reqs[i].tokens, alone->propose(1, ctx[i], 4)) << "sequence " << i + 1;
    EXPECT_EQ(reqs[i].tokens.size(), 4u);
  }
  // Next step: each accepted a guess or two; sequence 2 asks for fewer. Still one forward per position.
  for (size_t i = 0; i < ctx.size(); ++i) {
    ctx[i].insert(ctx[i].end(), reqs[i].tokens.begin(), reqs[i].tokens.begin() + static_cast<long>(i % 2 + 1));
    ctx[i].push_back(7);
  }
  reqs[1].max_k = 2;
  d->propose_batch(reqs);
  EXPECT_EQ(d->forwards(), 8);
  EXPECT_EQ(reqs[1].tokens.size(), 2u);
  for (size_t i = 0; i < ctx.size(); ++i)
    EXPECT_EQ(reqs[i].tokens, greedy(target(), ctx[i], reqs[i].max_k)) << "sequence " << i + 1;
  // The sequences end: every draft block is free again.
  EXPECT_GT(d->kv().usage().blocks_used, 0);
  for (size_t i = 0; i < ctx.size(); ++i) d->on_end(i + 1, ctx[i], 0);
  EXPECT_EQ(d->kv().usage().blocks_used, 0);
  EXPECT_EQ(d->kv().pool().available(), d->kv().pool().size());
}

TEST(draft, when_its_memory_runs_out_it_guesses_nothing_and_never_fails) {
  // Room for about one sequence of 40 tokens (the synthetic model: 2 layers x 2 KV heads x 64 x
  // fp16 x K and V = 1 KiB a token; 16-token blocks).
  auto d = make_draft(target(), 64 << 10);
  const int32_t blocks = d->kv().pool().size();
  ASSERT_GE(blocks, 3);
  ASSERT_LT(blocks, 6);
  std::vector<std::vector<int32_t>> ctx = {context(1, 40), context(2, 40)};
  std::vector<proposal_request> reqs;
  for (size_t i = 0; i < ctx.size(); ++i) reqs.push_back({i + 1, &ctx[i], 0, 4, {}});
  d->propose_batch(reqs);
  EXPECT_EQ(reqs[0].tokens.size(), 4u);
  EXPECT_TRUE(reqs[1].tokens.empty());  // did not fit beside the first: nothing held for it
  EXPECT_FALSE(d->kv().has_sequence(2));
  // Alone in a later step, sequence 2 takes the idle sequence 1's blocks.
  std::vector<proposal_request> second{{2, &ctx[1], 0, 4, {}}};
  d->propose_batch(second);
  EXPECT_EQ(second[0].tokens, greedy(target(), ctx[1], 4));
  EXPECT_FALSE(d->kv().has_sequence(1));
  // Longer than all of the draft's memory: no guess, and nothing kept.
  auto big = context(3, 16 * blocks + 1);
  EXPECT_TRUE(d->propose(3, big, 4).empty());
  EXPECT_FALSE(d->kv().has_sequence(3));
  d->on_end(2, ctx[1], 0);
  EXPECT_EQ(d->kv().usage().blocks_used, 0);
}

namespace {

// The scheduler makes its proposers from the registry; these names make a draft over a
// synthetic model and keep a pointer to it for the test to look into.
draft_proposer* last_made = nullptr;

void register_test_drafts() {
  static bool done = [] {
    for (auto [name, which] : {std::pair<const char*, int>{"test_draft_self", 0}, {"test_draft_small", 1}})
      (void)proposer_registry().add(name, [which](const speculative_config& c) -> result<std::unique_ptr<proposer>> {
        auto d = draft_proposer::make(which == 0 ? target() : small(), c);
        if (!d) return make_error(d.error());
        last_made = d.value().get();
        return std::unique_ptr<proposer>(std::move(d.value()));
      });
    return true;
  }();
  (void)done;
}

struct outcome {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  int64_t proposed = 0, accepted = 0, draft_forwards = 0, draft_fed = 0, steps = 0;
  bool idle = false, draft_idle = false;
};

// cost_rule false: the mechanism alone (the steps below cost 1 us each on the scheduler's clock,
// so the measured rule would count every real draft forward as far dearer than a step).
outcome run(const std::string& method, size_t batch, bool cost_rule = false) {
  register_test_drafts();
  last_made = nullptr;
  outcome o;
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 16ll << 20;
  auto be = model::make_backend("cpu", target(), bo);
  EXPECT_TRUE(be.ok()) << be.error();
  kv_geometry geo{be.value()->n_blocks(), be.value()->block_size(), target()->params().n_ctx_train};
  scheduler_config c;
  c.max_num_seqs = 16;
  c.speculative.method = method;
  c.speculative.draft_threads = 2;
  c.speculative.cost_rule = cost_rule;
  auto pol = scheduling_policy_registry().make("fcfs", policy_options{});
  scheduler_state sched(c, geo, std::move(pol.value()));
  executor_state exec(std::move(be.value()));
  for (size_t i = 0; i < batch; ++i) {
    admitted_request r;
    r.id = i + 1;
    r.prompt = context(static_cast<uint32_t>(i + 1), 12 + static_cast<int>(i) * 3);
    r.max_tokens = 32;
    sched.enqueue(std::move(r), 0);
  }
  int64_t now = 1;
  // One step at a time, each costing the same on the scheduler's clock.
  while (auto p = sched.plan(now)) {
    sched.apply(exec.run(*p), ++now);
    for (auto& t : sched.take_output().tokens) o.tokens[t.id].push_back(t.token);
    ++o.steps;
  }
  const auto st = sched.stats();
  o.proposed = st.spec_proposed;
  o.accepted = st.spec_accepted;
  o.idle = sched.empty() && sched.kv().pool().available() == geo.n_blocks;
  if (last_made) {
    o.draft_forwards = last_made->forwards();
    o.draft_fed = last_made->fed_tokens();
    o.draft_idle = last_made->kv().usage().blocks_used == 0;
  }
  return o;
}

}  // namespace

TEST(draft, through_the_scheduler_greedy_outputs_are_those_without_speculation) {
  for (size_t batch : {size_t{1}, size_t{4}}) {
    const auto plain = run("off", batch);
    ASSERT_EQ(plain.tokens.size(), batch);
    const auto self = run("test_draft_self", batch);
    const auto other = run("test_draft_small", batch);
    for (const auto& [id, toks] : plain.tokens) {
      EXPECT_EQ(self.tokens.at(id), toks) << "self draft, batch " << batch << ", request " << id;
      EXPECT_EQ(other.tokens.at(id), toks) << "small draft, batch " << batch << ", request " << id;
    }
    // The model as its own draft guesses what it decodes.
    ASSERT_GT(self.proposed, 0);
    EXPECT_GE(self.accepted, self.proposed * 9 / 10) << self.accepted << " of " << self.proposed;
    EXPECT_LT(self.steps, plain.steps);
    // Another model's guesses are often wrong: rejected, and the output is the same.
    ASSERT_GT(other.proposed, 0);
    EXPECT_LT(other.accepted, other.proposed);
    EXPECT_TRUE(plain.idle && self.idle && other.idle);
    EXPECT_TRUE(self.draft_idle && other.draft_idle) << "draft KV blocks left held";
    std::printf("batch %zu: self draft %lld of %lld accepted, %lld steps (off: %lld), %lld draft forwards; "
                "small draft %lld of %lld\n",
                batch, static_cast<long long>(self.accepted), static_cast<long long>(self.proposed),
                static_cast<long long>(self.steps), static_cast<long long>(plain.steps),
                static_cast<long long>(self.draft_forwards), static_cast<long long>(other.accepted),
                static_cast<long long>(other.proposed));
  }
}

TEST(draft, the_measured_rule_counts_the_drafts_own_forwards) {
  // With the cost rule on, the self draft's forwards (real wall time) cost far more than the
  // steps they would save (1 us each here): once its first forwards are measured it stops, and
  // the output is still the same.
  const auto plain = run("off", 1);
  const auto ruled = run("test_draft_self", 1, true);
  const auto free = run("test_draft_self", 1, false);
  EXPECT_EQ(ruled.tokens, plain.tokens);
  EXPECT_GT(free.proposed, 0);
  // The first try, before anything was measured, and the rule's own probes: one guess every
  // probe_steps steps in which it refused (scheduler_state::note_rule_refusal).
  const speculative_config d;
  EXPECT_LE(ruled.proposed, d.k * (1 + ruled.steps / d.probe_steps));
  EXPECT_LT(ruled.proposed, free.proposed);
}

TEST(draft, before_its_cost_is_measured_one_sequence_tries_it_not_the_whole_batch) {
  // Eight sequences, the rule on: the first step lets one of them try the draft (its prompt fed,
  // its guesses timed), and the measured cost then refuses the rest. Letting all eight try at
  // once fed every prompt to the draft in one step (on a compute-bound CPU a batch of long
  // prompts stalled that step for seconds: `troupe bench spec`, self draft at batch 16, 0.54x).
  const auto plain = run("off", 8);
  const auto ruled = run("test_draft_self", 8, true);
  EXPECT_EQ(ruled.tokens, plain.tokens);
  const int64_t longest_prompt = 12 + 7 * 3;
  EXPECT_GT(ruled.draft_fed, 0);
  EXPECT_LE(ruled.draft_fed, longest_prompt + speculative_config{}.k + 1) << "prompts fed to the draft";
  EXPECT_TRUE(ruled.idle && ruled.draft_idle);
  // Without the rule every sequence guesses: every prompt is fed.
  const auto free = run("test_draft_self", 8, false);
  EXPECT_GE(free.draft_fed, 8 * 12);
}

TEST(draft, batched_across_the_steps_sequences_one_forward_per_position) {
  // Four sequences that all speculate in every step (the self draft, steps in lockstep): the
  // draft runs at most k forwards per step (one per guessed position for all four), not 4k.
  const auto o = run("test_draft_self", 4);
  ASSERT_GT(o.proposed, 0);
  const int64_t k = speculative_config{}.k;
  EXPECT_LE(o.draft_forwards, o.steps * k);
  // Per sequence it would be about proposed forwards (one per guess) plus a prefill each.
  EXPECT_LT(o.draft_forwards, o.proposed / 2);
}

TEST(draft, the_draft_model_is_required_and_must_share_the_vocabulary) {
  speculative_config c;
  c.method = "draft";
  auto s = check_speculative_config(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("speculative.draft_model"), std::string::npos) << s.error();
  auto made = proposer_registry().make("draft", c);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().find("speculative.draft_model"), std::string::npos) << made.error();

  test::temp_dir dir("draft");
  auto write = [&](const std::string& name, std::vector<uint8_t> bytes) {
    std::ofstream(dir.str(name), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                          static_cast<std::streamsize>(bytes.size()));
    return dir.str(name);
  };
  test::synthetic_options o;
  const auto model_path = write("model.gguf", test::make_synthetic_gguf(o));
  o.seed = 9;
  o.n_layer = 1;
  const auto draft_path = write("draft.gguf", test::make_synthetic_gguf(o));
  // The same vocabulary but one token spelled otherwise.
  auto bytes = test::make_synthetic_gguf(o);
  const std::string from = "<|endoftext|>", to = "<|endOFtext|>";
  auto at = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
  ASSERT_NE(at, bytes.end());
  std::copy(to.begin(), to.end(), at);
  const auto odd_path = write("odd.gguf", bytes);

  EXPECT_TRUE(proposers::check_draft_model(draft_path, model_path).ok());
  s = proposers::check_draft_model(odd_path, model_path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("token "), std::string::npos) << s.error();
  EXPECT_NE(s.error().find("<|endOFtext|>"), std::string::npos) << s.error();

  // The config loader: each case an error naming the key.
  auto load = [&](const std::string& extra) {
    return config::parse_config("[model]\npath = \"" + model_path + "\"\n[speculative]\nmethod = \"draft\"\n" + extra,
                                "t.toml");
  };
  auto ok = load("draft_model = \"" + draft_path + "\"\n");
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok->pipeline.scheduler.speculative.draft_model, draft_path);
  for (const auto& [extra, words] : std::vector<std::pair<std::string, std::string>>{
           {"", "speculative.draft_model is required"},
           {"draft_model = \"" + dir.str("none.gguf") + "\"\n", "cannot open"},
           {"draft_model = \"" + odd_path + "\"\n", "differs from the model"}}) {
    auto bad = load(extra);
    ASSERT_FALSE(bad.ok()) << extra;
    EXPECT_NE(bad.error().find("speculative.draft_model"), std::string::npos) << bad.error();
    EXPECT_NE(bad.error().find(words), std::string::npos) << bad.error();
  }
  // A vocabulary of another size (the real model's against a synthetic one): both sizes are
  // named, in draft_real_model_test.cpp.
}

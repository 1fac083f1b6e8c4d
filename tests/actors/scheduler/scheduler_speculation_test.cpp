// Speculative decoding in scheduler_state (scheduler_speculation.cpp): outputs identical to
// decoding plainly, KV back to idle, per-request methods, back-off, the measured cost rule and its
// probe, adaptive k, penalties per verified position.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/scheduler/speculative/proposer.hpp"
#include "tests/actors/scheduler/scheduler_harness.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::test_support;

// --- Speculative decoding (scheduler_config::speculative) ------------------------------------

namespace {

scheduler_config spec_cfg(const std::string& method, int32_t k = 4, int32_t ngram_min = 1, int32_t max_batch = 0) {
  auto c = cfg(/*budget*/ 256, /*seqs*/ 16);
  c.speculative.method = method;
  c.speculative.k = k;
  c.speculative.ngram_min = ngram_min;
  c.speculative.ngram_max = 3;
  c.speculative.max_batch = max_batch;
  return c;
}

// A copy-heavy text: the fake model repeats a 9-token script (the token after n tokens is
// script[(n - 1) % 9]), so after a prompt holding the script the next tokens can be looked up.
fake_options copying(std::vector<int32_t> script = {40, 41, 42, 43, 44, 45, 46, 47, 48}) {
  fake_options fo;
  fo.n_blocks = 512;
  fo.script = std::move(script);
  return fo;
}

std::vector<int32_t> repeated(const std::vector<int32_t>& script, size_t n) {
  std::vector<int32_t> p;
  for (size_t i = 0; i < n; ++i) p.push_back(script[i % script.size()]);
  return p;
}

}  // namespace

// Greedy outputs with speculation (every proposer) are those without it, token for token, at
// batch 1 and 16, on copy-heavy and on hash (unpredictable) texts; guesses were accepted where
// the text is predictable, the KV accounting is back to idle, and the usage counts what was proposed.
TEST(scheduler_state, speculation_keeps_outputs_and_returns_kv_to_idle) {
  for (const std::string method : {"ngram", "suffix"})
  for (bool copy : {true, false})
    for (uint64_t batch : {uint64_t{1}, uint64_t{16}}) {
      fake_options fo = copy ? copying() : fake_options{};
      fo.n_blocks = 512;
      fo.eog_every = copy ? 0 : 9;
      harness plain(fo, spec_cfg("off")), spec(fo, spec_cfg(method));
      for (uint64_t i = 1; i <= batch; ++i) {
        auto p = copy ? repeated(fo.script, 10 + i) : prompt_of(static_cast<uint32_t>(i), 12);
        if (!copy) p.insert(p.end(), p.begin(), p.end());  // something to look up, though the text will not follow it
        plain.sched.enqueue(req(i, p, 40), plain.now);
        spec.sched.enqueue(req(i, p, 40), spec.now);
      }
      plain.run();
      spec.run();
      const std::string what = method + " " + (copy ? "copy-heavy" : "hash") + " batch " + std::to_string(batch);
      int64_t proposed = 0, accepted = 0;
      for (uint64_t i = 1; i <= batch; ++i) {
        EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << what << " request " << i;
        ASSERT_TRUE(spec.finished.count(i)) << what;
        EXPECT_EQ(spec.finished[i].reason, plain.finished[i].reason) << what;
        EXPECT_EQ(spec.finished[i].usage.completion_tokens, plain.finished[i].usage.completion_tokens);
        EXPECT_EQ(plain.finished[i].usage.speculative_proposed, 0);
        proposed += spec.finished[i].usage.speculative_proposed;
        accepted += spec.finished[i].usage.speculative_accepted;
      }
      EXPECT_EQ(spec.sched.stats().spec_proposed, proposed) << what;
      EXPECT_EQ(spec.sched.stats().spec_accepted, accepted) << what;
      if (copy) {
        EXPECT_GT(accepted, proposed / 2) << what;
        // At least 40% of the steps saved (suffix guesses at most 2 tokens per matched token, so
        // its first guesses after a short match are shorter than ngram's).
        EXPECT_LT(spec.plans.size() * 10, plain.plans.size() * 6) << what << ": speculation saved too few steps";
      }
      EXPECT_TRUE(spec.sched.empty()) << what;
      EXPECT_EQ(spec.sched.kv().pool().available(), fo.n_blocks) << what;
      EXPECT_EQ(spec.sched.kv().usage().blocks_used, 0) << what;
    }
}

// A step that accepts several tokens still ends the request at max_tokens (no token past it)
// and at an end-of-generation token (none after it), though the guesses reached past both.
TEST(scheduler_state, speculation_ends_at_max_tokens_and_at_eog_inside_an_accepted_run) {
  {
    auto fo = copying();
    harness h(fo, spec_cfg("ngram", /*k*/ 8));
    auto p = repeated(fo.script, 20);
    h.sched.enqueue(req(1, p, 7), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 7));
    EXPECT_EQ(h.finished[1].reason, finish::length);
    EXPECT_GT(h.finished[1].usage.speculative_accepted, 0);
    for (const auto& plan : h.plans)
      for (const auto& e : plan.entries) EXPECT_LE(e.proposal.size(), 6u);  // 7 - 1 generated first
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
  }
  {
    auto fo = copying({10, 11, 12, 13, 14, 15, 256, 16, 17});
    harness h(fo, spec_cfg("ngram", /*k*/ 6));
    auto p = repeated(fo.script, 18);
    h.sched.enqueue(req(1, p, 40), h.now);
    h.run();
    const auto ref = fake_reference(fo, p, 40);
    ASSERT_LT(ref.size(), 40u);
    EXPECT_EQ(h.tokens[1], ref);
    EXPECT_EQ(h.finished[1].reason, finish::stop);
    bool eog_proposed = false;
    for (const auto& plan : h.plans)
      for (const auto& e : plan.entries)
        eog_proposed = eog_proposed || std::find(e.proposal.begin(), e.proposal.end(), 256) != e.proposal.end();
    EXPECT_TRUE(eog_proposed) << "the test meant the guesses to run past the end";
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
  }
}

// A request chooses its own method ("off" overrides the server's); an unknown one fails at once,
// naming the known ones. Above max_batch running sequences nobody speculates.
TEST(scheduler_state, speculation_per_request_and_above_the_batch_bound) {
  auto fo = copying();
  harness h(fo, spec_cfg("ngram", 4, 1, /*max_batch*/ 2));
  auto p = repeated(fo.script, 12);
  auto off = req(1, p, 30);
  off.speculative = "off";
  auto bad = req(2, p, 30);
  bad.speculative = "eagle";
  h.sched.enqueue(off, h.now);
  h.sched.enqueue(bad, h.now);
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 30));
  EXPECT_EQ(h.finished[1].usage.speculative_proposed, 0);
  ASSERT_TRUE(h.failed.count(2));
  EXPECT_EQ(h.failed[2].code, errc::invalid_request);
  EXPECT_NE(h.failed[2].message.find("'eagle'"), std::string::npos) << h.failed[2].message;
  EXPECT_NE(h.failed[2].message.find("ngram"), std::string::npos) << h.failed[2].message;

  harness many(fo, spec_cfg("ngram", 4, 1, /*max_batch*/ 2));
  for (uint64_t i = 1; i <= 4; ++i) many.sched.enqueue(req(i, p, 30), many.now);
  many.run();
  for (const auto& plan : many.plans) {
    size_t proposing = 0;
    for (const auto& e : plan.entries) proposing += e.proposal.empty() ? 0 : 1;
    if (plan.entries.size() > 2) EXPECT_EQ(proposing, 0u) << "step " << plan.step;
  }
  for (uint64_t i = 1; i <= 4; ++i) EXPECT_EQ(many.tokens[i], fake_reference(fo, p, 30)) << i;
}

// A sequence alone waits for its sample in flight (to guess from it) only while its proposer
// expects a guess: on a text with nothing to look up its decode steps stay pipelined, the next
// planned while the last runs (a wait idles the executor for the scheduler's round trip).
TEST(scheduler_state, speculation_alone_pipelines_while_no_guess_is_expected) {
  fake_options fo;
  fo.n_blocks = 512;
  auto c = spec_cfg("ngram", 4, /*ngram_min*/ 3);
  harness h(fo, c);
  const auto p = prompt_of(7, 12);
  h.sched.enqueue(req(1, p, 40), h.now);
  h.run();
  EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 40));
  int decode = 0, pipelined = 0, proposals = 0;
  for (const auto& plan : h.plans) {
    ASSERT_EQ(plan.entries.size(), 1u);
    const auto& e = plan.entries[0];
    if (e.tokens.size() + (e.feed_last_sample ? 1 : 0) != 1) continue;  // the prompt
    ++decode;
    pipelined += e.feed_last_sample ? 1 : 0;
    proposals += e.proposal.empty() ? 0 : 1;
  }
  EXPECT_EQ(proposals, 0) << "a random text repeats no 3 tokens";
  EXPECT_GE(decode, 38);
  EXPECT_GE(pipelined, decode - 1) << "every decode step but the first is planned while the one before runs";
  // With a copy-heavy text the guesses come, so the sequence waits for them and they are made.
  fake_options copy = copying();
  harness hc(copy, spec_cfg("ngram", 4, 2));
  hc.sched.enqueue(req(1, repeated(copy.script, 12), 40), hc.now);
  hc.run();
  EXPECT_GT(hc.finished[1].usage.speculative_accepted, 20);
}

// Guesses that keep failing stop being made: after the rolling acceptance falls below
// min_acceptance the request decodes plainly for probe_steps steps, then probes once more.
TEST(scheduler_state, speculation_backs_off_when_guesses_fail) {
  // After the prompt 40 41 42 the text goes 40 41 50, 40 41 51, 40 41 52, ...: each time the tail
  // 40 41 comes back, the history guesses what followed it last time, and is wrong. (ngram_min 1:
  // the 40 before it is a 1-gram seen before, so the sequence expects a guess and waits for it.)
  fake_options fo;
  fo.n_blocks = 512;
  fo.script = {0, 0};
  for (int32_t i = 0; i < 12; ++i) fo.script.insert(fo.script.end(), {40, 41, 50 + i});
  const std::vector<int32_t> p = {40, 41, 42};
  auto tries = [&](double min_acceptance) {
    auto c = spec_cfg("ngram", 4, 1);
    c.speculative.min_acceptance = min_acceptance;
    c.speculative.probe_steps = 10;
    harness h(fo, c);
    h.sched.enqueue(req(1, p, 33), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 33));
    EXPECT_EQ(h.finished[1].usage.speculative_accepted, 0);
    int n = 0;
    for (const auto& plan : h.plans) n += plan.entries[0].proposal.empty() ? 0 : 1;
    return n;
  };
  const int always = tries(0.0), backing_off = tries(0.5);
  EXPECT_GE(always, 8);
  // Two failures bring the rolling rate (half weight per step) under 0.5; then a probe after 10
  // steps, and after 20 when that one fails too.
  EXPECT_GE(backing_off, 2);
  EXPECT_LE(backing_off, 4);
}

// The batch bound is measured, not configured (max_batch 0): with step times that grow steeply
// with the tokens fed (compute-bound), 16 sequences do not speculate, since 4 verified positions
// would cost the whole batch more than the accepted tokens save (but for one probe); one sequence
// alone does. With nearly flat step times (memory-bound) the 16 do. The outputs are the same in
// every case.
TEST(scheduler_state, speculation_stops_where_the_measured_step_cost_is_high) {
  auto fo = copying();
  auto p = repeated(fo.script, 20);
  auto proposals = [&](int64_t us_per_token, uint64_t batch, size_t min_entries) {
    auto c = spec_cfg("ngram", 4, 1, /*max_batch*/ 0);
    c.speculative.probe_steps = 32;  // one probe of the rule at most in these 40 tokens
    harness h(fo, c);
    h.step_us = [&](const step_plan& plan) { return 1000 + us_per_token * plan.n_tokens(); };
    for (uint64_t i = 1; i <= batch; ++i) h.sched.enqueue(req(i, p, 40), h.now);
    h.run();
    for (uint64_t i = 1; i <= batch; ++i) EXPECT_EQ(h.tokens[i], fake_reference(fo, p, 40)) << i;
    EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
    size_t n = 0;
    for (const auto& plan : h.plans)
      if (plan.entries.size() >= min_entries)
        for (const auto& e : plan.entries) n += e.proposal.size();
    return n;
  };
  // At most one probe's guesses (the rule is tested again after probe_steps = 32 refusing steps:
  // a_refusing_cost_rule_is_probed_again).
  EXPECT_LE(proposals(/*compute-bound*/ 400, 16, 8), 4u);
  EXPECT_GT(proposals(/*compute-bound*/ 400, 1, 1), 0u);
  EXPECT_GT(proposals(/*memory-bound*/ 10, 16, 8), 0u);
}

namespace {

// A proposer that knows copying()'s script (the token after n tokens is script[(n - 1) % 9]):
// it guesses the true continuation, but with the guess at `wrong_at` (0-based; -1: none) off by
// one. Registered once under test names.
class script_oracle final : public proposer {
 public:
  script_oracle(std::vector<int32_t> script, int wrong_at) : script_(std::move(script)), wrong_at_(wrong_at) {}
  std::string name() const override { return "test_oracle"; }
  std::vector<int32_t> propose(uint64_t, const std::vector<int32_t>& context, int32_t max_k) override {
    std::vector<int32_t> g;
    for (int32_t j = 0; j < max_k; ++j) {
      const size_t n = context.size() + static_cast<size_t>(j);  // tokens before the guessed one
      g.push_back(script_[(n - 1) % script_.size()] + (j == wrong_at_ ? 1 : 0));
    }
    return g;
  }

 private:
  std::vector<int32_t> script_;
  int wrong_at_;
};

void register_oracles() {
  static const bool once = [] {
    for (int wrong_at : {-1, 1}) {
      const std::string name = wrong_at < 0 ? "test_oracle" : "test_oracle_wrong_at_2";
      const auto st = proposer_registry().add(name, [wrong_at](const speculative_config&) -> result<std::unique_ptr<proposer>> {
        return std::unique_ptr<proposer>(new script_oracle(copying().script, wrong_at));
      });
      EXPECT_TRUE(st.ok()) << st.error();
    }
    return true;
  }();
  (void)once;
}

}  // namespace

// k follows the accepted run (scheduler_state::spec_k): a request whose guesses keep failing at
// the second ends up proposing 2 (its run of 1, plus one to probe) and keeps its acceptance rate
// at 50% by it (4 guesses of which 1 kept would read 25%, under min_acceptance); one whose
// guesses are all kept goes on proposing k.
TEST(scheduler_state, speculation_adapts_k_to_the_accepted_run) {
  register_oracles();
  auto sizes = [](const harness& h) {
    std::vector<size_t> v;
    for (const auto& plan : h.plans)
      for (const auto& e : plan.entries)
        if (!e.proposal.empty()) v.push_back(e.proposal.size());
    return v;
  };
  auto show = [](const std::vector<size_t>& v) {
    std::string s;
    for (auto x : v) s += std::to_string(x) + " ";
    return s;
  };
  auto fo = copying();
  auto p = repeated(fo.script, 20);
  {
    harness h(fo, spec_cfg("test_oracle_wrong_at_2", /*k*/ 6));
    h.sched.enqueue(req(1, p, 60), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 60));
    const auto v = sizes(h);
    ASSERT_GE(v.size(), 12u) << show(v);
    EXPECT_EQ(v.front(), 6u) << show(v);
    // From the prior of k, the run falls towards 1 (6, 5, 3, 3, 2, ...) and k settles at 2.
    for (size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i], v[i - 1]) << "proposal " << i << ": " << show(v);
    for (size_t i = 4; i + 1 < v.size(); ++i) EXPECT_EQ(v[i], 2u) << "proposal " << i << ": " << show(v);
    const auto& f = h.finished[1].usage;
    EXPECT_EQ(f.speculative_accepted, static_cast<int32_t>(v.size())) << "one kept a step";
    EXPECT_GT(f.speculative_accepted * 10, f.speculative_proposed * 4) << show(v);
  }
  {
    harness h(fo, spec_cfg("test_oracle", /*k*/ 5));
    h.sched.enqueue(req(1, p, 60), h.now);
    h.run();
    EXPECT_EQ(h.tokens[1], fake_reference(fo, p, 60));
    const auto v = sizes(h);
    ASSERT_GE(v.size(), 5u) << show(v);
    for (size_t i = 0; i + 1 < v.size(); ++i) EXPECT_EQ(v[i], 5u) << "proposal " << i << ": " << show(v);
    EXPECT_EQ(h.finished[1].usage.speculative_accepted, h.finished[1].usage.speculative_proposed);
  }
}

// Penalties and logit_bias apply per verified position (the executor moves the window along the
// guesses): a copy-heavy text whose repeats the penalties push the model off, greedy and seeded,
// gives the same tokens with every proposer as without, though guesses are rejected.
TEST(scheduler_state, speculation_with_penalties_keeps_outputs) {
  for (const std::string method : {"ngram", "suffix"})
    for (float temperature : {0.0f, 0.8f}) {
      auto fo = copying();
      auto p = repeated(fo.script, 20);
      harness plain(fo, spec_cfg("off")), spec(fo, spec_cfg(method));
      for (uint64_t i = 1; i <= 3; ++i) {
        auto r = req(i, p, 40);
        r.sampling.temperature = temperature;
        r.sampling.seed = i;
        // The fake model's pick has logit 10, the others 0: a token 5 times or more in the window
        // loses to them.
        r.sampling.frequency_penalty = 2.0f;
        r.sampling.penalty_last_n = 36 + static_cast<int32_t>(i) * 4;
        r.sampling.logit_bias = {{47, -100.0f}};
        plain.sched.enqueue(r, plain.now);
        spec.sched.enqueue(r, spec.now);
      }
      plain.run();
      spec.run();
      const std::string what = method + " temperature " + std::to_string(temperature);
      int64_t proposed = 0, accepted = 0;
      for (uint64_t i = 1; i <= 3; ++i) {
        EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << what << " request " << i;
        EXPECT_EQ(std::count(plain.tokens[i].begin(), plain.tokens[i].end(), 47), 0) << what;
        proposed += spec.finished[i].usage.speculative_proposed;
        accepted += spec.finished[i].usage.speculative_accepted;
      }
      EXPECT_GT(accepted, 0) << what;
      EXPECT_EQ(spec.sched.kv().pool().available(), fo.n_blocks) << what;
    }
}

// A "no" from the measured rule is tested again: after probe_steps steps in which the rule
// refused, one sequence speculates anyway and its step measures the extra positions afresh. While
// the steps stay compute-bound the probes stay rare (at most one sequence a probe, about one probe
// per probe_steps steps) and the rule goes on refusing; when the same machine turns memory-bound
// (a neighbour's load gone: step times flat), the probes find it out and the batch speculates
// again. Without the probe, the entry the rule reads above the batch (learnt while compute-bound)
// would never be measured again and speculation would stay off for good.
TEST(scheduler_state, a_refusing_cost_rule_is_probed_again) {
  auto fo = copying();
  auto p = repeated(fo.script, 20);
  auto c = spec_cfg("ngram", 4, 1, /*max_batch*/ 0);
  c.speculative.probe_steps = 2;
  harness h(fo, c);
  int64_t us_per_token = 400;  // compute-bound
  h.step_us = [&](const step_plan& plan) { return 1000 + us_per_token * plan.n_tokens(); };
  constexpr uint64_t batch = 16;
  for (uint64_t i = 1; i <= batch; ++i) h.sched.enqueue(req(i, p, 300), h.now);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(h.step());
  size_t probing_plans = 0, decode_plans = 0;
  for (const auto& plan : h.plans) {
    if (plan.entries.size() < 8) continue;
    ++decode_plans;
    size_t proposing = 0;
    for (const auto& e : plan.entries) proposing += e.proposal.empty() ? 0 : 1;
    EXPECT_LE(proposing, 1u);  // a probe is one sequence
    probing_plans += proposing;
  }
  EXPECT_GE(probing_plans, 5u);
  EXPECT_LE(probing_plans, decode_plans / 2 + 1);
  EXPECT_GE(h.sched.stats().spec_rule_probes, 5);

  us_per_token = 10;  // memory-bound now
  const size_t before = h.plans.size();
  h.run();
  // Plans where several sequences speculate at once (at most one did above). The rule counts
  // the guesses already in a step, and the entries above the batch that compute-bound steps left
  // in the table are measured afresh one probe at a time, so this grows step by step.
  size_t batched_speculation = 0;
  for (size_t i = before; i < h.plans.size(); ++i) {
    size_t proposing = 0;
    for (const auto& e : h.plans[i].entries) proposing += e.proposal.empty() ? 0 : 1;
    batched_speculation += proposing >= 5 ? 1 : 0;
  }
  EXPECT_GE(batched_speculation, 10u);
  for (uint64_t i = 1; i <= batch; ++i) EXPECT_EQ(h.tokens[i], fake_reference(fo, p, 300)) << i;
  EXPECT_EQ(h.sched.kv().pool().available(), fo.n_blocks);
}

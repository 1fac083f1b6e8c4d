// Speculative decoding on SmolLM2-135M: scheduler_state and executor_state over the cpu backend,
// greedy, with each proposer's speculation and without. The outputs must be equal token for token (each
// verified position's logits are those of a one-token decode there: model/cpu_backend), at
// batch 1 and 16, with fp16 and q8 K/V; the KV accounting must be back to idle.
#include <gtest/gtest.h>

#include <map>

#include "actors/executor/executor_state.hpp"
#include "actors/scheduler/scheduler_state.hpp"
#include "model/llama_model.hpp"
#include "model/paged_attention.hpp"
#include "model/tokenizer.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

std::shared_ptr<model::llama_model> load() {
  static std::shared_ptr<model::llama_model> m = [] {
    auto r = model::llama_model::load(test::real_model_path());
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? r.value() : nullptr;
  }();
  return m;
}

std::vector<std::string> prompts() {
  return {
      "Repeat exactly: The quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire.",
      "Fix the bug and print the whole function again:\nint add(int a, int b) {\n  return a - b;\n}",
      "Fill a JSON record with name, city and age from: Maria lives in Lisbon and is 34 years old.",
      "Tell me one fact about the moon.",
      "Write a short sentence about rivers.",
      "What is chess?",
      "Quote this line twice: to be or not to be, that is the question.",
      "Describe owls briefly.",
  };
}

struct outcome {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  int64_t proposed = 0, accepted = 0, steps = 0;
  bool idle = false;
};

outcome run(const std::string& method, size_t batch, bool q8) {
  outcome o;
  auto m = load();
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 64ll << 20;
  bo.kv_q8 = q8;
  auto be = model::make_backend("cpu", m, bo);
  EXPECT_TRUE(be.ok()) << be.error();
  if (!be.ok()) return o;
  auto tok = model::tokenizer::from_gguf(m->file());
  EXPECT_TRUE(tok.ok()) << tok.error();
  kv_geometry geo{be.value()->n_blocks(), be.value()->block_size(), m->params().n_ctx_train};
  scheduler_config c;
  c.max_num_seqs = 16;
  c.speculative.method = method;
  // Speculate at batch 16 too (the clock below makes every step cost the same, so the measured
  // rule of step_cost.hpp lets it): the outputs must not change.
  c.speculative.max_batch = 0;
  auto pol = scheduling_policy_registry().make("fcfs", policy_options{});
  scheduler_state sched(c, geo, std::move(pol.value()));
  executor_state exec(std::move(be.value()));
  const auto ps = prompts();
  for (size_t i = 0; i < batch; ++i) {
    admitted_request r;
    r.id = i + 1;
    r.prompt = tok->encode("<|im_start|>user\n" + ps[i % ps.size()] + "<|im_end|>\n<|im_start|>assistant\n", false, true);
    r.max_tokens = 48;
    r.eog = tok->eog_ids();
    sched.enqueue(std::move(r), 0);
  }
  int64_t now = 1;
  while (auto p = sched.plan(now)) {  // one step at a time: the pipelined path has its own tests
    sched.apply(exec.run(*p), ++now);
    for (auto& t : sched.take_output().tokens) o.tokens[t.id].push_back(t.token);
    ++o.steps;
  }
  const auto st = sched.stats();
  o.proposed = st.spec_proposed;
  o.accepted = st.spec_accepted;
  o.idle = sched.empty() && sched.kv().pool().available() == geo.n_blocks;
  return o;
}

}  // namespace

TEST(scheduler_state_real_model, speculation_gives_the_same_greedy_tokens) {
  if (!test::real_model_available()) GTEST_SKIP() << "no model at " << test::real_model_path();
  for (const std::string method : {"ngram", "suffix"})
  for (bool q8 : {false, true}) {
    if (q8 && !model::kv_q8_supported(load()->params().head_dim)) continue;
    for (size_t batch : {size_t{1}, size_t{16}}) {
      const auto plain = run("off", batch, q8), spec = run(method, batch, q8);
      const std::string what = method + " " + (q8 ? "q8" : "fp16") + " batch " + std::to_string(batch);
      ASSERT_EQ(plain.tokens.size(), batch) << what;
      for (const auto& [id, toks] : plain.tokens) EXPECT_EQ(spec.tokens.at(id), toks) << what << " request " << id;
      EXPECT_GT(spec.proposed, 0) << what;
      EXPECT_GT(spec.accepted, 0) << what;
      // A batch runs as many steps as its longest request needs: only batch 1 must save steps.
      if (batch == 1) EXPECT_LT(spec.steps, plain.steps) << what;
      else EXPECT_LE(spec.steps, plain.steps) << what;
      EXPECT_TRUE(plain.idle && spec.idle) << what;
      std::printf("%s: %lld of %lld proposed tokens accepted, %lld steps instead of %lld\n", what.c_str(),
                  static_cast<long long>(spec.accepted), static_cast<long long>(spec.proposed),
                  static_cast<long long>(spec.steps), static_cast<long long>(plain.steps));
    }
  }
}

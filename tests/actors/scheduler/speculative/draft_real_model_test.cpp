// The draft proposer on SmolLM2-135M, through scheduler_state and executor_state over the cpu
// backend, greedy. Only one real model exists here, so the draft is the model itself: its
// guesses are what the model decodes (acceptance near 100%; not 100% only where a guess was
// computed in another summation order than the verified position), and the output must be
// identical token for token to decoding without speculation. A draft that is often wrong is
// tested with synthetic models in draft_test.cpp. Also: a draft whose vocabulary differs from
// the model's is refused naming both sizes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "actors/executor/executor_state.hpp"
#include "actors/scheduler/scheduler_state.hpp"
#include "actors/scheduler/speculative/draft.hpp"
#include "model/llama_model.hpp"
#include "model/tokenizer.hpp"
#include "tests/support/synthetic_model.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe;
using namespace troupe::actors;
using proposers::draft_proposer;

namespace {

std::shared_ptr<model::llama_model> load() {
  static std::shared_ptr<model::llama_model> m = [] {
    auto r = model::llama_model::load(test::real_model_path());
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? r.value() : nullptr;
  }();
  return m;
}

// "draft" as the registry makes it from speculative.draft_model, with a pointer kept for the
// test to look into the draft's forwards and KV blocks.
draft_proposer* last_made = nullptr;

void register_probe() {
  static bool done = [] {
    (void)proposer_registry().add("test_draft_real", [](const speculative_config& c) -> result<std::unique_ptr<proposer>> {
      auto made = proposer_registry().make("draft", c);
      if (!made) return make_error(made.error());
      last_made = dynamic_cast<draft_proposer*>(made.value().get());
      return std::move(made.value());
    });
    return true;
  }();
  (void)done;
}

struct outcome {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  int64_t proposed = 0, accepted = 0, steps = 0, draft_forwards = 0;
  bool idle = false, draft_idle = false;
};

outcome run(const std::string& method, size_t batch) {
  register_probe();
  last_made = nullptr;
  outcome o;
  auto m = load();
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 64ll << 20;
  auto be = model::make_backend("cpu", m, bo);
  EXPECT_TRUE(be.ok()) << be.error();
  if (!be.ok()) return o;
  auto tok = model::tokenizer::from_gguf(m->file());
  kv_geometry geo{be.value()->n_blocks(), be.value()->block_size(), m->params().n_ctx_train};
  scheduler_config c;
  c.max_num_seqs = 16;
  c.speculative.method = method;
  c.speculative.draft_model = test::real_model_path();
  c.speculative.draft_threads = 2;
  // The mechanism: a model as its own draft never pays (its forwards cost what the steps save),
  // and the measured rule would rightly stop it (draft_test.cpp tests that).
  c.speculative.cost_rule = false;
  auto pol = scheduling_policy_registry().make("fcfs", policy_options{});
  scheduler_state sched(c, geo, std::move(pol.value()));
  executor_state exec(std::move(be.value()));
  const std::vector<std::string> ps = {
      "Repeat exactly: The quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire.",
      "Tell me one fact about the moon.",
      "Fix the bug and print the whole function again:\nint add(int a, int b) {\n  return a - b;\n}",
      "What is chess?",
  };
  for (size_t i = 0; i < batch; ++i) {
    admitted_request r;
    r.id = i + 1;
    r.prompt = tok->encode("<|im_start|>user\n" + ps[i % ps.size()] + "<|im_end|>\n<|im_start|>assistant\n", false, true);
    r.max_tokens = 40;
    r.eog = tok->eog_ids();
    sched.enqueue(std::move(r), 0);
  }
  int64_t now = 1;
  while (auto p = sched.plan(now)) {  // each step costs the same: the measured rule lets it speculate
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
    o.draft_idle = last_made->kv().usage().blocks_used == 0;
  }
  return o;
}

}  // namespace

TEST(draft_real_model, the_model_as_its_own_draft_gives_the_same_greedy_tokens) {
  if (!test::real_model_available()) GTEST_SKIP() << "no model at " << test::real_model_path();
  for (size_t batch : {size_t{1}, size_t{8}}) {
    const auto plain = run("off", batch), spec = run("test_draft_real", batch);
    const std::string what = "batch " + std::to_string(batch);
    ASSERT_EQ(plain.tokens.size(), batch) << what;
    for (const auto& [id, toks] : plain.tokens) EXPECT_EQ(spec.tokens.at(id), toks) << what << " request " << id;
    ASSERT_GT(spec.proposed, 0) << what;
    EXPECT_GE(spec.accepted * 10, spec.proposed * 9) << what << ": " << spec.accepted << " of " << spec.proposed;
    EXPECT_LT(spec.steps, plain.steps) << what;
    EXPECT_TRUE(plain.idle && spec.idle) << what;
    EXPECT_TRUE(spec.draft_idle) << what << ": draft KV blocks left held";
    std::printf("%s: %lld of %lld proposed tokens accepted, %lld steps instead of %lld, %lld draft forwards\n",
                what.c_str(), static_cast<long long>(spec.accepted), static_cast<long long>(spec.proposed),
                static_cast<long long>(spec.steps), static_cast<long long>(plain.steps),
                static_cast<long long>(spec.draft_forwards));
  }
}

TEST(draft_real_model, a_draft_with_another_vocabulary_is_refused_naming_both_sizes) {
  if (!test::real_model_available()) GTEST_SKIP() << "no model at " << test::real_model_path();
  test::temp_dir dir("draft-real");
  const auto bytes = test::make_synthetic_gguf(test::synthetic_options{});
  std::ofstream(dir.str("small.gguf"), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  auto s = proposers::check_draft_model(dir.str("small.gguf"), test::real_model_path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("49152"), std::string::npos) << s.error();
  const auto small = test::make_synthetic_file(test::synthetic_options{})->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(small.ok());
  EXPECT_NE(s.error().find("vocabulary of " + std::to_string(small->size())), std::string::npos) << s.error();
  // The model as its own draft passes.
  EXPECT_TRUE(proposers::check_draft_model(test::real_model_path(), test::real_model_path()).ok());
}

// executor_state driven directly: sampling paths, pipelined feeding of the previous sample,
// and faults passing through.
#include "actors/executor_state.hpp"

#include <gtest/gtest.h>

#include <random>

#include "tests/actors/fake_backend.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fake_backend;
using troupe::test::fake_options;
using troupe::test::fake_reference;

namespace {

// Random logits with ties at the top, to check which of equal maxima greedy picks.
class random_logits final : public model::backend {
 public:
  random_logits() {
    hp_.n_vocab = 1000;
    hp_.n_ctx_train = 4096;
  }
  std::string name() const override { return "random"; }
  const model::hparams& params() const override { return hp_; }
  int32_t n_blocks() const override { return 64; }
  int32_t block_size() const override { return 16; }
  size_t kv_bytes_per_token() const override { return 1; }
  result<model::batch_logits> forward(const model::batch& b) override {
    model::batch_logits out;
    out.n_vocab = hp_.n_vocab;
    for (const auto& s : b.seqs) {
      if (!s.want_logits) continue;
      out.seq_ids.push_back(s.seq_id);
      for (int i = 0; i < hp_.n_vocab; ++i) out.data.push_back(static_cast<float>(rng_() % 50) * 0.25f);
    }
    last_ = out;
    return out;
  }
  model::batch_logits last_;

 private:
  model::hparams hp_;
  std::mt19937 rng_{3};
};

step_entry entry(uint64_t id, std::vector<int32_t> tokens, int32_t n_past, bool sample = true) {
  step_entry e;
  e.seq_id = id;
  e.tokens = std::move(tokens);
  e.n_past = n_past;
  e.block_table = {static_cast<int32_t>(id)};
  e.sample = sample;
  return e;
}

}  // namespace

TEST(executor_state, greedy_fast_path_matches_the_sampler) {
  auto be = std::make_unique<random_logits>();
  auto* raw = be.get();
  executor_state ex(std::move(be));
  step_plan p;
  p.step = 1;
  p.entries.push_back(entry(1, {5}, 0));
  p.entries.push_back(entry(2, {6}, 0));
  p.entries[1].logprob = true;
  for (int round = 0; round < 20; ++round) {
    auto r = ex.run(p);
    ASSERT_EQ(r.samples.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      auto ref = model::sample_token(raw->last_.row(i), 1000, {}, {}, 0);
      EXPECT_EQ(r.samples[i].token, ref.token);
      if (i == 1) {
        EXPECT_FLOAT_EQ(r.samples[i].logprob, ref.logprob);
      }
    }
  }
}

TEST(executor_state, feeds_the_previous_sample_when_asked) {
  fake_options fo;
  executor_state ex(std::make_unique<fake_backend>(fo));
  step_plan a;
  a.step = 1;
  a.entries.push_back(entry(1, {65, 66, 67}, 0));
  auto ra = ex.run(a);
  step_plan b;
  b.step = 2;
  auto e = entry(1, {}, 3);
  e.feed_last_sample = true;
  b.entries.push_back(e);
  auto rb = ex.run(b);
  ASSERT_EQ(rb.samples.size(), 1u);
  auto ref = fake_reference(fo, {65, 66, 67}, 2);
  EXPECT_EQ(ra.samples[0].token, ref[0]);
  EXPECT_EQ(rb.samples[0].token, ref[1]);
  // A reference to a sample the previous step did not make: left out, reported as token -1.
  step_plan c;
  c.step = 3;
  auto lost = entry(7, {}, 3);
  lost.feed_last_sample = true;
  c.entries.push_back(lost);
  c.entries.push_back(entry(2, {70}, 0));
  auto rc = ex.run(c);
  ASSERT_EQ(rc.samples.size(), 2u);
  EXPECT_EQ(rc.samples[0].token, -1);
  EXPECT_GE(rc.samples[1].token, 0);
}

TEST(executor_state, backend_errors_are_values_and_faults_throw) {
  fake_options fo;
  fo.throw_on_call = 2;
  executor_state ex(std::make_unique<fake_backend>(fo));
  step_plan p;
  p.step = 1;
  auto e = entry(1, {1, 2, 3, 4, 5}, 0);
  e.block_table.clear();  // too short
  p.entries.push_back(e);
  auto r = ex.run(p);
  EXPECT_NE(r.error.find("block table"), std::string::npos);
  EXPECT_THROW(ex.run(p), std::runtime_error);
}

// executor_state driven directly: sampling paths, pipelined feeding of the previous sample,
// and faults passing through.
#include "actors/executor/executor_state.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <thread>

#include "tests/support/fake_backend.hpp"

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
  // Rows run each on a thread of their own, started last row first (as a pool may take them).
  void for_each_row(int64_t n, const std::function<void(int64_t i)>& fn) override {
    ++row_runs;
    std::vector<std::thread> t;
    for (int64_t i = n - 1; i >= 0; --i) t.emplace_back([&fn, i] { fn(i); });
    for (auto& x : t) x.join();
  }
  model::batch_logits last_;
  int row_runs = 0;

 private:
  model::hparams hp_;
  std::mt19937 rng_{3};
};

// A backend that samples greedy rows itself, as the cuda backend does on the device: it answers
// token 100 + seq_id with logprob -0.5 and counts which path each step took.
class sampling_backend final : public model::backend {
 public:
  sampling_backend() {
    hp_.n_vocab = 500;
    hp_.n_ctx_train = 4096;
  }
  std::string name() const override { return "sampling"; }
  const model::hparams& params() const override { return hp_; }
  int32_t n_blocks() const override { return 64; }
  int32_t block_size() const override { return 16; }
  size_t kv_bytes_per_token() const override { return 1; }
  result<model::batch_logits> forward(const model::batch& b) override {
    ++forwards;
    model::batch_logits out;
    out.n_vocab = hp_.n_vocab;
    for (const auto& s : b.seqs) {
      if (!s.want_logits) continue;
      out.seq_ids.push_back(s.seq_id);
      for (int i = 0; i < hp_.n_vocab; ++i) out.data.push_back(i == 7 ? 1.0f : 0.0f);  // host argmax: 7
    }
    return out;
  }
  bool can_sample(const model::sampling_params& p) const override {
    return p.temperature <= 0.0f && p.repetition_penalty == 1.0f;
  }
  result<std::vector<model::token_logprob>> forward_sampled(const model::batch& b,
                                                            const std::vector<model::row_sampling>& rows) override {
    ++sampled_steps;
    if (fail) return troupe::make_error("device lost");
    std::vector<model::token_logprob> out;
    for (const auto& s : b.seqs)
      if (s.want_logits) out.push_back({static_cast<int32_t>(100 + s.seq_id), -0.5f});
    EXPECT_EQ(out.size(), rows.size());
    return out;
  }
  int forwards = 0, sampled_steps = 0;
  bool fail = false;

 private:
  model::hparams hp_;
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

// Rows that cost more than an argmax are sampled on the backend's threads (for_each_row): each
// row's token, logprob and alternatives are what sample_token gives for it alone, with its
// penalty window and the token fed this step, whatever order the threads ran in.
TEST(executor_state, samples_costly_rows_on_the_backend_threads) {
  auto be = std::make_unique<random_logits>();
  auto* raw = be.get();
  executor_state ex(std::move(be));
  step_plan first;
  first.step = 1;
  first.entries.push_back(entry(9, {1}, 0));  // its sample is fed to the next step
  ex.run(first);
  const int32_t fed = ex.run(first).samples[0].token;  // (a second run: last_sample_ holds it)

  step_plan p;
  p.step = 2;
  for (uint64_t id = 1; id <= 5; ++id) p.entries.push_back(entry(id, {static_cast<int32_t>(id)}, 3));
  p.entries[0].sampling.temperature = 0.9f;
  p.entries[0].sampling.seed = 11;
  p.entries[1].sampling.temperature = 1.3f;
  p.entries[1].sampling.top_p = 0.8f;
  p.entries[1].sampling.repetition_penalty = 1.2f;
  p.entries[1].recent = {4, 8, 15};
  p.entries[1].n_generated = 7;
  p.entries[2].logprob = true;
  p.entries[2].sampling.n_logprobs = 3;
  p.entries[3].sampling.temperature = 0.7f;  // feeds the previous sample, with a window
  p.entries[3].sampling.presence_penalty = 1.0f;
  p.entries[3].seq_id = 9;
  p.entries[3].tokens.clear();
  p.entries[3].feed_last_sample = true;
  p.entries[3].recent = {16, 23};
  // entries[4]: plain greedy
  auto r = ex.run(p);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(raw->row_runs, 1);
  ASSERT_EQ(r.samples.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto& e = p.entries[i];
    std::vector<int32_t> window = e.recent;
    if (e.feed_last_sample) window.push_back(fed);
    const auto ref = model::sample_token(raw->last_.row(i), 1000, e.sampling, window, e.n_generated, e.logprob);
    EXPECT_EQ(r.samples[i].seq_id, e.seq_id);
    EXPECT_EQ(r.samples[i].token, ref.token) << "row " << i;
    if (e.logprob || !e.sampling.plain_greedy()) EXPECT_FLOAT_EQ(r.samples[i].logprob, ref.logprob) << "row " << i;
    ASSERT_EQ(r.samples[i].top.size(), ref.top.size());
    for (size_t k = 0; k < ref.top.size(); ++k) EXPECT_EQ(r.samples[i].top[k].token, ref.top[k].token);
  }
  // One costly row (or none): sampled in place, no thread hand-off.
  step_plan q;
  q.step = 3;
  q.entries.push_back(entry(1, {2}, 4));
  q.entries.push_back(entry(2, {3}, 4));
  q.entries[0].sampling.temperature = 0.5f;
  ex.run(q);
  EXPECT_EQ(raw->row_runs, 1);
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

// Rows the backend can sample come back as its tokens without any logits reaching the
// executor; one row it cannot sample (a penalty) sends the whole step through forward() and the
// host sampler; a step without sampled rows needs no sampling at all; backend errors are values.
TEST(executor_state, samples_in_the_backend_when_it_can) {
  auto be = std::make_unique<sampling_backend>();
  auto* raw = be.get();
  executor_state ex(std::move(be));
  step_plan p;
  p.step = 1;
  p.entries.push_back(entry(1, {5}, 0));
  p.entries.push_back(entry(2, {6, 7}, 0, /*sample=*/false));  // a prompt chunk
  p.entries.push_back(entry(3, {8}, 0));
  auto r = ex.run(p);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.samples[0].token, 101);
  EXPECT_EQ(r.samples[1].token, 103);
  EXPECT_FLOAT_EQ(r.samples[1].logprob, -0.5f);
  EXPECT_EQ(raw->sampled_steps, 1);
  EXPECT_EQ(raw->forwards, 0);

  p.entries[2].sampling.repetition_penalty = 1.2f;
  r = ex.run(p);
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.samples[0].token, 7);
  EXPECT_EQ(r.samples[1].token, 7);
  EXPECT_EQ(raw->forwards, 1);
  EXPECT_EQ(raw->sampled_steps, 1);

  step_plan chunk;
  chunk.step = 3;
  chunk.entries.push_back(entry(4, {1, 2, 3}, 0, /*sample=*/false));
  r = ex.run(chunk);
  EXPECT_TRUE(r.samples.empty());
  EXPECT_EQ(raw->forwards, 2);

  raw->fail = true;
  p.entries[2].sampling.repetition_penalty = 1.0f;
  r = ex.run(p);
  EXPECT_EQ(r.error, "device lost");
}

// Structured outputs: random logits, a constraint, and every sampled token keeps the output a
// valid prefix until the only choice left is the end; a second executor with no memory of the
// sequence rebuilds its matcher from the tokens the step carries.
TEST(executor_state, constrained_rows_only_sample_allowed_tokens_and_end_when_complete) {
  auto codec = make_byte_codec(1000, 256);
  const structured::constraint_spec spec{structured::kind::regex, "(yes|no|maybe)-[0-9]{2}"};
  for (int seed = 0; seed < 20; ++seed) {
    executor_state ex(std::make_unique<random_logits>(), codec);
    std::vector<int32_t> out;
    int32_t n_past = 0;
    for (int step = 0; step < 40; ++step) {
      step_plan p;
      p.step = static_cast<uint64_t>(step + 1);
      auto e = entry(1, step == 0 ? std::vector<int32_t>{'Q', ':'} : std::vector<int32_t>{out.back()}, n_past);
      e.sampling.temperature = 1.0f;
      e.sampling.seed = static_cast<uint64_t>(seed);
      e.constraint = spec;
      e.n_generated = static_cast<int64_t>(out.size());
      e.generated = out;
      n_past += static_cast<int32_t>(e.tokens.size());
      p.entries.push_back(e);
      auto r = ex.run(p);
      ASSERT_EQ(r.samples.size(), 1u);
      ASSERT_TRUE(r.samples[0].error.empty()) << r.samples[0].error;
      if (r.samples[0].token == 256) break;
      out.push_back(r.samples[0].token);
      if (step == 3) ex = executor_state(std::make_unique<random_logits>(), codec);  // forgets: rebuilt from `generated`
    }
    std::string text;
    for (auto t : out) {
      ASSERT_LT(t, 256) << "only byte tokens spell the regex";
      text += static_cast<char>(t);
    }
    EXPECT_TRUE(text == "yes-" + text.substr(4) || text.rfind("no-", 0) == 0 || text.rfind("maybe-", 0) == 0) << text;
    ASSERT_GE(text.size(), 5u);
    const std::string digits = text.substr(text.find('-') + 1);
    EXPECT_EQ(digits.size(), 2u) << text;
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(digits[0])) && std::isdigit(static_cast<unsigned char>(digits[1]))) << text;
  }
}

TEST(executor_state, a_constrained_row_without_a_codec_fails_by_name_and_others_go_on) {
  executor_state ex(std::make_unique<random_logits>());
  step_plan p;
  p.step = 1;
  auto a = entry(1, {'a'}, 0);
  a.constraint = {structured::kind::json_object, ""};
  p.entries.push_back(a);
  p.entries.push_back(entry(2, {'b'}, 0));
  auto r = ex.run(p);
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_EQ(r.samples[0].token, -1);
  EXPECT_NE(r.samples[0].error.find("structured outputs"), std::string::npos) << r.samples[0].error;
  EXPECT_GE(r.samples[1].token, 0);
}

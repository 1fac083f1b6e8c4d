// executor_state driven directly: sampling paths, pipelined feeding of the previous sample,
// faults passing through, and speculative verification (penalties and constraints per position,
// the output distribution unchanged).
#include "actors/executor/executor_state.hpp"

#include <gtest/gtest.h>

#include <boost/math/distributions/chi_squared.hpp>

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
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

// --- Speculative verification ----------------------------------------------------------------

namespace {

// Logits that are a fixed function of the two tokens before each row's position, spread over the
// printable ASCII bytes (and low elsewhere), so that temperature, penalties, logit_bias and a
// constraint's mask all change the pick. The tokens are kept by position per sequence, as K/V
// would be: a later step's tokens overwrite rejected guesses.
class bigram_backend final : public model::backend {
 public:
  bigram_backend() {
    hp_.n_vocab = 320;
    hp_.n_ctx_train = 4096;
  }
  std::string name() const override { return "bigram"; }
  const model::hparams& params() const override { return hp_; }
  int32_t n_blocks() const override { return 64; }
  int32_t block_size() const override { return 16; }
  size_t kv_bytes_per_token() const override { return 1; }
  result<model::batch_logits> forward(const model::batch& b) override {
    model::batch_logits out;
    out.n_vocab = hp_.n_vocab;
    for (const auto& s : b.seqs) {
      auto& h = hist_[s.seq_id];
      h.resize(static_cast<size_t>(s.n_past) + s.tokens.size());
      std::copy(s.tokens.begin(), s.tokens.end(), h.begin() + s.n_past);
      if (!s.want_logits) continue;
      const auto end = static_cast<int32_t>(h.size());
      for (int32_t pos = end - s.n_logits; pos < end; ++pos) {
        const uint32_t a = static_cast<uint32_t>(h[static_cast<size_t>(pos)]);
        const uint32_t p = pos > 0 ? static_cast<uint32_t>(h[static_cast<size_t>(pos - 1)]) : 7u;
        out.seq_ids.push_back(s.seq_id);
        for (int32_t t = 0; t < hp_.n_vocab; ++t) {
          uint32_t x = (a * 2654435761u) ^ (p * 40503u) ^ (static_cast<uint32_t>(t) * 97u);
          x ^= x >> 13;
          x *= 0x5bd1e995u;
          x ^= x >> 15;
          out.data.push_back(t >= 32 && t < 127 ? static_cast<float>(x % 1000) / 250.0f : -3.0f);
        }
      }
    }
    return out;
  }

 private:
  model::hparams hp_;
  std::map<uint64_t, std::vector<int32_t>> hist_;
};

// One sequence decoded through executor_state the way the scheduler plans it: the prompt, then
// each step the last token (with `guess`'s proposal after it), the penalty window as the last
// penalty_last_n tokens known, a constraint's generated tokens and `remaining`.
struct decoding {
  uint64_t id = 1;
  std::vector<int32_t> prompt;
  step_entry shape;       // sampling, logprob, constraint
  int32_t max_tokens = 0;
  std::function<std::vector<int32_t>(const std::vector<int32_t>& out, int step)> guess;  // null: none
  std::vector<int32_t> out;
  std::vector<float> logprobs;                          // out's, where the shape asks for them
  std::vector<std::vector<model::token_logprob>> tops;  // out's alternatives, likewise
  int steps = 0, proposed = 0, accepted = 0;
  bool done = false;
};

// Decodes every sequence in lock step (one plan holds all unfinished ones) until each has
// max_tokens tokens or sampled token 256 (the byte codec's end).
void decode_all(executor_state& ex, std::vector<decoding>& ds) {
  for (uint64_t step = 1;; ++step) {
    step_plan p;
    p.step = step;
    std::vector<decoding*> in;
    for (auto& d : ds) {
      if (d.done) continue;
      auto e = d.shape;
      e.seq_id = d.id;
      e.tokens = d.out.empty() ? d.prompt : std::vector<int32_t>{d.out.back()};
      // Everything known but the last token is in K/V memory (rejected guesses get overwritten).
      e.n_past = d.out.empty() ? 0 : static_cast<int32_t>(d.prompt.size() + d.out.size()) - 1;
      e.block_table = {static_cast<int32_t>(d.id)};
      e.sample = true;
      e.n_generated = static_cast<int64_t>(d.out.size());
      const auto& sp = e.sampling;
      if (sp.repetition_penalty != 1.0f || sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f) {
        std::vector<int32_t> all = d.prompt;
        all.insert(all.end(), d.out.begin(), d.out.end());
        const auto keep = std::min<size_t>(all.size(), static_cast<size_t>(sp.penalty_last_n));
        e.recent.assign(all.end() - static_cast<long>(keep), all.end());
      }
      if (!e.constraint.empty()) {
        e.generated = d.out;
        e.remaining = d.max_tokens - static_cast<int32_t>(d.out.size());
      }
      if (d.guess) {
        e.proposal = d.guess(d.out, d.steps);
        const auto room = static_cast<size_t>(d.max_tokens - static_cast<int32_t>(d.out.size()) - 1);
        if (e.proposal.size() > room) e.proposal.resize(room);
      }
      d.proposed += static_cast<int>(e.proposal.size());
      p.entries.push_back(std::move(e));
      in.push_back(&d);
    }
    if (in.empty()) return;
    auto r = ex.run(p);
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.samples.size(), in.size());
    if (r.samples.size() != in.size()) return;
    for (size_t i = 0; i < in.size(); ++i) {
      auto& d = *in[i];
      const auto& t = r.samples[i];
      EXPECT_TRUE(t.error.empty()) << t.error;
      ++d.steps;
      d.accepted += static_cast<int>(t.more.size());
      std::vector<int32_t> got = {t.token};
      got.insert(got.end(), t.more.begin(), t.more.end());
      if (d.shape.logprob) {
        EXPECT_EQ(t.more_logprob.size(), t.more.size());
        EXPECT_EQ(t.more_top.size(), t.more.size());
      }
      for (size_t j = 0; j < got.size(); ++j) {
        const int32_t tok = got[j];
        if (tok < 0 || tok == 256) {
          d.done = true;
          break;
        }
        d.out.push_back(tok);
        if (d.shape.logprob) {
          d.logprobs.push_back(j == 0 ? t.logprob : j - 1 < t.more_logprob.size() ? t.more_logprob[j - 1] : 0.0f);
          d.tops.push_back(j == 0 ? t.top : j - 1 < t.more_top.size() ? t.more_top[j - 1] : std::vector<model::token_logprob>{});
        }
        if (static_cast<int32_t>(d.out.size()) >= d.max_tokens) {
          d.done = true;
          break;
        }
      }
    }
  }
}

// A proposer that knows the answer and lies once: the next k tokens of `ref`, with the one at
// (step mod k+1) changed (at k: none changed), so that steps accept 0..k guesses in turn.
std::function<std::vector<int32_t>(const std::vector<int32_t>&, int)> lying_oracle(const std::vector<int32_t>& ref, int k) {
  return [ref, k](const std::vector<int32_t>& out, int step) {
    std::vector<int32_t> g;
    for (size_t i = out.size(); i < ref.size() && g.size() < static_cast<size_t>(k); ++i) g.push_back(ref[i]);
    const auto wrong = static_cast<size_t>(step % (k + 1));
    if (wrong < g.size()) g[wrong] = g[wrong] == 'x' ? 'y' : 'x';
    return g;
  };
}

}  // namespace

// Penalties and logit_bias apply per verified position: row j's window holds the guesses before
// it (sliding over a short penalty_last_n), so greedy and seeded sampling give the same tokens
// with speculation as without, guesses kept and rejected alike. Two sequences share each step,
// one with a constraint (its rows are sampled in order, the matcher advanced through the kept
// guesses, `remaining` one less per row: with max_tokens 34 the budget closing decides the end).
TEST(executor_state, speculation_applies_penalties_bias_and_constraints_per_position) {
  auto codec = make_byte_codec(320, 256);
  const structured::constraint_spec list{structured::kind::regex, "\\[(yes|no|maybe)(, (yes|no|maybe))*\\]"};
  struct variant {
    const char* what;
    float temperature;
    bool constrained;
  };
  for (const variant v : {variant{"greedy", 0.0f, false}, variant{"sampled", 0.9f, false},
                          variant{"greedy constrained", 0.0f, true}, variant{"sampled constrained", 1.0f, true}})
    for (uint64_t seed : {1u, 2u, 3u}) {
      step_entry shape;
      shape.sampling.temperature = v.temperature;
      shape.sampling.seed = seed;
      shape.sampling.repetition_penalty = 1.3f;
      shape.sampling.frequency_penalty = 0.4f;
      shape.sampling.presence_penalty = 0.3f;
      shape.sampling.penalty_last_n = 5;
      shape.sampling.logit_bias = {{'e', 1.5f}, {'o', -100.0f}};
      if (v.constrained) shape.constraint = list;
      auto make = [&](uint64_t id, std::vector<int32_t> prompt) {
        decoding d;
        d.id = id;
        d.prompt = std::move(prompt);
        d.shape = shape;
        d.shape.sampling.seed = seed + id;
        d.max_tokens = 34;
        return d;
      };
      std::vector<decoding> plain = {make(1, {'Q', ':', ' '}), make(2, {'A', 'B'})};
      plain[1].shape.constraint = {};  // the second is never constrained: rows of both kinds in one step
      executor_state ex_plain(std::make_unique<bigram_backend>(), codec);
      decode_all(ex_plain, plain);
      auto spec = plain;
      for (auto& d : spec) {
        d.guess = lying_oracle(d.out, 4);
        d.out.clear();
        d.steps = d.proposed = d.accepted = 0;
        d.done = false;
      }
      executor_state ex_spec(std::make_unique<bigram_backend>(), codec);
      decode_all(ex_spec, spec);
      for (size_t i = 0; i < spec.size(); ++i) {
        const std::string what = std::string(v.what) + " seed " + std::to_string(seed) + " sequence " + std::to_string(i);
        ASSERT_GE(plain[i].out.size(), 4u) << what;
        EXPECT_EQ(spec[i].out, plain[i].out) << what;
        EXPECT_GT(spec[i].accepted, 0) << what;
        EXPECT_LT(spec[i].accepted, spec[i].proposed) << what;
        EXPECT_LT(spec[i].steps, plain[i].steps) << what;
      }
      if (v.constrained) {
        std::string text(plain[0].out.begin(), plain[0].out.end());
        EXPECT_EQ(text.front(), '[') << text;
        EXPECT_EQ(text.back(), ']') << text << ": the budget closing ends it complete";
      }
    }
}

// A request asking for logprobs speculates too, and every kept position answers its own: the
// same tokens, logprobs and top alternatives as decoding without speculation, greedy and
// sampled, with penalties moving the distributions from position to position.
TEST(executor_state, speculation_answers_each_kept_positions_logprobs) {
  auto codec = make_byte_codec(320, 256);
  for (const float temperature : {0.0f, 0.8f}) {
    decoding d;
    d.prompt = {'L', 'P', ':'};
    d.shape.logprob = true;
    d.shape.sampling.n_logprobs = 3;
    d.shape.sampling.temperature = temperature;
    d.shape.sampling.seed = 7;
    d.shape.sampling.repetition_penalty = 1.2f;
    d.shape.sampling.penalty_last_n = 4;
    d.max_tokens = 30;
    std::vector<decoding> plain = {d};
    executor_state ex_plain(std::make_unique<bigram_backend>(), codec);
    decode_all(ex_plain, plain);
    ASSERT_GE(plain[0].out.size(), 8u);
    std::vector<decoding> spec = {d};
    spec[0].guess = lying_oracle(plain[0].out, 4);
    executor_state ex_spec(std::make_unique<bigram_backend>(), codec);
    decode_all(ex_spec, spec);
    const std::string what = "temperature " + std::to_string(temperature);
    EXPECT_GT(spec[0].accepted, 0) << what;
    EXPECT_LT(spec[0].steps, plain[0].steps) << what;
    ASSERT_EQ(spec[0].out, plain[0].out) << what;
    ASSERT_EQ(spec[0].logprobs.size(), plain[0].out.size()) << what;
    ASSERT_EQ(spec[0].tops.size(), plain[0].out.size()) << what;
    for (size_t i = 0; i < plain[0].out.size(); ++i) {
      EXPECT_FLOAT_EQ(spec[0].logprobs[i], plain[0].logprobs[i]) << what << " token " << i;
      EXPECT_LT(spec[0].logprobs[i], 0.0f) << what << " token " << i;
      ASSERT_EQ(spec[0].tops[i].size(), 3u) << what << " token " << i;
      ASSERT_EQ(plain[0].tops[i].size(), 3u) << what << " token " << i;
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(spec[0].tops[i][k].token, plain[0].tops[i][k].token) << what << " token " << i;
        EXPECT_FLOAT_EQ(spec[0].tops[i][k].logprob, plain[0].tops[i][k].logprob) << what << " token " << i;
      }
    }
  }
}

namespace {

// Three tokens, the logits of each row a fixed function of the token at its position: a Markov
// chain whose distributions are known exactly and spread (every probability between 0.2 and 0.5).
class markov_backend final : public model::backend {
 public:
  static constexpr float table[3][3] = {{0.0f, 0.5f, -0.3f}, {0.4f, 0.0f, 0.2f}, {-0.2f, 0.3f, 0.0f}};
  markov_backend() {
    hp_.n_vocab = 3;
    hp_.n_ctx_train = 4096;
  }
  std::string name() const override { return "markov"; }
  const model::hparams& params() const override { return hp_; }
  int32_t n_blocks() const override { return 64; }
  int32_t block_size() const override { return 16; }
  size_t kv_bytes_per_token() const override { return 1; }
  result<model::batch_logits> forward(const model::batch& b) override {
    model::batch_logits out;
    out.n_vocab = 3;
    for (const auto& s : b.seqs) {
      if (!s.want_logits) continue;
      for (size_t r = s.tokens.size() - static_cast<size_t>(s.n_logits); r < s.tokens.size(); ++r) {
        out.seq_ids.push_back(s.seq_id);
        for (float x : table[s.tokens[r]]) out.data.push_back(x);
      }
    }
    return out;
  }

 private:
  model::hparams hp_;
};

// P(next | prev) at temperature 1.
double markov_p(int32_t prev, int32_t next) {
  double z = 0;
  for (float x : markov_backend::table[prev]) z += std::exp(static_cast<double>(x));
  return std::exp(static_cast<double>(markov_backend::table[prev][next])) / z;
}

}  // namespace

// The distribution of sampled outputs is unchanged by speculation (issue 23, "Verification"):
// 2000 seeds at temperature 1 on a model whose next-token distribution is known, the first
// three tokens after the prompt as one of 27 outcomes. With a proposer that always guesses token
// 1 twice (right about a third of the time), the outcomes' counts fit the exact probabilities
// (chi-square p > 0.001) and fit the counts of decoding without speculation over 2000 other seeds
// (two-sample chi-square p > 0.001); with the same seeds the tokens are the same, seed for seed
// (each row has the draw its position would have without speculation).
TEST(executor_state, speculative_sampling_keeps_the_output_distribution) {
  constexpr int n_seeds = 2000;
  auto outcome = [](const std::vector<int32_t>& t) { return t[0] * 9 + t[1] * 3 + t[2]; };
  auto run = [&](uint64_t seed, bool speculate, int& proposed, int& accepted) {
    decoding d;
    d.prompt = {0};
    d.shape.sampling.temperature = 1.0f;
    d.shape.sampling.seed = seed;
    d.max_tokens = 3;
    if (speculate) d.guess = [](const std::vector<int32_t>&, int) { return std::vector<int32_t>{1, 1}; };
    std::vector<decoding> ds = {d};
    executor_state ex(std::make_unique<markov_backend>());
    decode_all(ex, ds);
    proposed += ds[0].proposed;
    accepted += ds[0].accepted;
    return ds[0].out;
  };
  std::vector<double> spec(27, 0), plain_same(27, 0), plain_other(27, 0);
  int proposed = 0, accepted = 0, unused_p = 0, unused_a = 0, differ = 0;
  for (uint64_t seed = 1; seed <= n_seeds; ++seed) {
    const auto s = run(seed, true, proposed, accepted);
    const auto p = run(seed, false, unused_p, unused_a);
    const auto o = run(seed + 1000000, false, unused_p, unused_a);
    ASSERT_EQ(s.size(), 3u);
    ASSERT_EQ(o.size(), 3u);
    differ += s != p ? 1 : 0;
    spec[static_cast<size_t>(outcome(s))] += 1;
    plain_same[static_cast<size_t>(outcome(p))] += 1;
    plain_other[static_cast<size_t>(outcome(o))] += 1;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(spec, plain_same);
  // Not vacuous: guesses were made, some kept and some rejected.
  EXPECT_GT(accepted, proposed / 10);
  EXPECT_LT(accepted, proposed);

  boost::math::chi_squared dist(26);
  double exact = 0, two_sample = 0;
  for (int32_t c = 0; c < 27; ++c) {
    const double expected = n_seeds * markov_p(0, c / 9) * markov_p(c / 9, (c / 3) % 3) * markov_p((c / 3) % 3, c % 3);
    ASSERT_GT(expected, 5.0) << "every cell large enough for the chi-square approximation";
    const auto i = static_cast<size_t>(c);
    exact += (spec[i] - expected) * (spec[i] - expected) / expected;
    const double both = spec[i] + plain_other[i];
    if (both > 0) two_sample += (spec[i] - plain_other[i]) * (spec[i] - plain_other[i]) / both;
  }
  const double p_exact = boost::math::cdf(boost::math::complement(dist, exact));
  const double p_two = boost::math::cdf(boost::math::complement(dist, two_sample));
  EXPECT_GT(p_exact, 0.001) << "chi-square " << exact << " against the exact probabilities";
  EXPECT_GT(p_two, 0.001) << "chi-square " << two_sample << " against sampling without speculation";
}

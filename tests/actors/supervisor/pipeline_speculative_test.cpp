// Speculative decoding through the whole pipeline (fake backend, byte codec): a stop string that
// falls inside a run of accepted guesses cuts the text exactly where decoding without
// speculation cuts it, a constrained request speculates with the same tokens as without, and a
// request asking for logprobs gets each position's own.
#include "actors/supervisor/pipeline.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "actors/client.hpp"
#include "actors/runtime.hpp"
#include "tests/support/fake_pipeline.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;
using troupe::test::fake_options;

namespace {

// The fake model copies a fixed text (fake_options::script): the token after n tokens of
// history is script[(n - 1) % size], so a prompt holding the text lets ngram guess what follows.
fake_options copying(const std::string& text) {
  fake_options fo;
  fo.n_blocks = 256;
  fo.script.assign(text.begin(), text.end());
  fo.step_us = 1000;  // flat step times: the measured rule lets one sequence speculate
  return fo;
}

pipeline_config config(const std::string& method) {
  auto c = test::small_pipeline_config();
  c.cache.enabled = false;
  c.scheduler.speculative.method = method;
  c.scheduler.speculative.ngram_min = 1;
  return c;
}

completion run(const std::string& method, const fake_options& fo, const request_spec& r) {
  runtime rt;
  auto p = test::start_fake(rt, config(method), fo);
  if (!p) return {};
  client c(*p);
  auto out = c.submit(r)->wait(30s);
  p->stop();
  return out;
}

// Each token's id, logprob and alternatives, read off the stream, and its usage.
struct logprobbed {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<model::token_logprob>> tops;
  usage_info usage;
  bool done = false;
};

logprobbed run_logprobs(const std::string& method, const fake_options& fo, const request_spec& r) {
  runtime rt;
  auto p = test::start_fake(rt, config(method), fo);
  logprobbed out;
  if (!p) return out;
  client c(*p);
  auto s = c.submit(r);
  while (auto e = s->next(30s)) {
    if (auto* t = std::get_if<token_event>(&*e)) {
      out.tokens.push_back(t->token);
      out.logprobs.push_back(t->logprob);
      out.tops.push_back(t->top);
    } else if (auto* d = std::get_if<done_event>(&*e)) {
      out.usage = d->usage;
      out.done = true;
      break;
    } else {
      break;  // an error: out.done stays false
    }
  }
  p->stop();
  return out;
}

}  // namespace

// A request asking for logprobs speculates like any other, and each token of an accepted run
// carries its own position's logprob and alternatives: the same as decoding without speculation.
TEST(pipeline_speculative, a_logprobs_request_speculates_with_the_same_logprobs) {
  const std::string text = "red green blue red green blue yellow ";
  const auto fo = copying(text);
  auto r = test::prompt_spec(text + text, 40);
  r.logprobs = true;
  r.sampling.n_logprobs = 2;
  const auto plain = run_logprobs("off", fo, r);
  const auto spec = run_logprobs("ngram", fo, r);
  ASSERT_TRUE(plain.done);
  ASSERT_TRUE(spec.done);
  ASSERT_EQ(spec.tokens, plain.tokens);
  EXPECT_GT(spec.usage.speculative_accepted, 10) << "the request speculated";
  ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size());
  for (size_t i = 0; i < plain.tokens.size(); ++i) {
    EXPECT_FLOAT_EQ(spec.logprobs[i], plain.logprobs[i]) << "token " << i;
    ASSERT_EQ(plain.tops[i].size(), 2u) << "token " << i;
    ASSERT_EQ(spec.tops[i].size(), 2u) << "token " << i;
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(spec.tops[i][k].token, plain.tops[i][k].token) << "token " << i;
      EXPECT_FLOAT_EQ(spec.tops[i][k].logprob, plain.tops[i][k].logprob) << "token " << i;
    }
  }
}

TEST(pipeline_speculative, a_stop_string_inside_an_accepted_run_cuts_where_plain_decoding_does) {
  const std::string text = "one two three four five six seven eight nine ten ";
  const auto fo = copying(text);
  auto r = test::prompt_spec(text + text, 60);
  // Without a stop string: ngram's guesses are kept (the run the stop string falls in below).
  const auto plain_all = run("off", fo, r);
  const auto spec_all = run("ngram", fo, r);
  ASSERT_TRUE(plain_all.ok()) << plain_all.error.message;
  ASSERT_TRUE(spec_all.ok()) << spec_all.error.message;
  EXPECT_EQ(spec_all.text, plain_all.text);
  EXPECT_GT(spec_all.usage.speculative_accepted, 20) << "guesses kept steadily";
  const std::string stop = "ive s";
  const auto at = plain_all.text.find(stop);
  ASSERT_NE(at, std::string::npos) << plain_all.text;
  ASSERT_GT(at, 10u) << "the stop string falls after speculation got going";

  r.stop = {stop};
  const auto plain = run("off", fo, r);
  const auto spec = run("ngram", fo, r);
  ASSERT_TRUE(spec.ok()) << spec.error.message;
  EXPECT_EQ(plain.text, plain_all.text.substr(0, at));
  EXPECT_EQ(spec.text, plain.text);
  EXPECT_EQ(spec.finish_reason, finish::stop);
  EXPECT_EQ(plain.finish_reason, finish::stop);
  EXPECT_EQ(spec.tokens, plain.tokens);
}

// A constraint applies per verified position: the model copies a list that the regex allows for
// a while and then does not (a "maybe" it does not know), and the budget closing (max_tokens)
// ends it; with ngram the tokens are those without speculation, and guesses were kept.
TEST(pipeline_speculative, a_constrained_request_speculates_with_the_same_tokens) {
  const std::string text = "[yes, no, yes, no, yes, no, maybe, yes, no, yes, no, ";
  const auto fo = copying(text);
  auto r = test::prompt_spec(text + text + "[", 48);  // the model goes on with text[0]
  r.constraint = {structured::kind::regex, "\\[(yes|no)(, (yes|no))*\\]"};
  const auto plain = run("off", fo, r);
  const auto spec = run("ngram", fo, r);
  ASSERT_TRUE(plain.ok()) << plain.error.message;
  ASSERT_TRUE(spec.ok()) << spec.error.message;
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.text, plain.text);
  EXPECT_EQ(spec.finish_reason, plain.finish_reason);
  EXPECT_GT(spec.usage.speculative_accepted, 0);
  EXPECT_LT(spec.usage.speculative_accepted, spec.usage.speculative_proposed) << "some guesses did not fit";
  ASSERT_FALSE(plain.text.empty());
  EXPECT_EQ(plain.text.front(), '[') << plain.text;
  EXPECT_EQ(plain.text.back(), ']') << plain.text;
}

// Speculative decoding through the whole pipeline (fake backend, byte codec): a stop string that
// falls inside a run of accepted guesses cuts the text exactly where decoding without
// speculation cuts it, and a constrained request speculates with the same tokens as without.
#include "actors/supervisor/pipeline.hpp"

#include <gtest/gtest.h>

#include <string>
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

}  // namespace

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

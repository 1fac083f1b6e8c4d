// Output filters and the admission policy through the whole pipeline (fake backend), swapped while
// serving with pipeline::reconfigure: new streams get the new filters, a stream running across
// the swap keeps the ones it started with, a filter that ends a stream frees its sequence, and
// a configuration a part refuses is rejected whole with the running one kept.
#include "actors/supervisor/pipeline.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "actors/client.hpp"
#include "actors/runtime.hpp"
#include "tests/support/changed_stages.hpp"
#include "tests/support/fake_pipeline.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;
using troupe::test::fake_options;

namespace {

pipeline_config base_config() {
  auto c = test::small_pipeline_config();
  c.cache.enabled = false;  // every request runs: what the filters see is generated
  return c;
}

std::string replace_all(std::string s, const std::string& what, const std::string& with) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size())) s.replace(at, what.size(), with);
  return s;
}

filter_spec redact(const std::string& word) {
  return {"redact", {{"words", std::vector<std::string>{word}}, {"replacement", std::string("<R>")},
                     {"whole_words", false}, {"case_sensitive", true}}};
}

}  // namespace

TEST(pipeline_filters, swapped_filters_apply_to_new_streams) {
  runtime rt;
  fake_options fo;
  auto cfg = base_config();
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  const std::string prompt = "filter me";
  const std::string plain = test::fake_text(fo, prompt, 40);
  const std::string word = plain.substr(10, 3);
  auto first = c.submit(test::prompt_spec(prompt, 40))->wait(10s);
  ASSERT_TRUE(first.ok()) << first.error.message;
  EXPECT_EQ(first.text, plain);

  auto next = cfg;
  next.streamer.filters = {redact(word)};
  auto r = p->reconfigure(next, test::changed_stages(p->config(), next));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, std::vector<std::string>{"streamer"});
  EXPECT_EQ(p->config().streamer.filters.size(), 1u);
  auto redacted = c.submit(test::prompt_spec(prompt, 40))->wait(10s);
  ASSERT_TRUE(redacted.ok()) << redacted.error.message;
  EXPECT_EQ(redacted.text, replace_all(plain, word, "<R>"));
  EXPECT_EQ(redacted.finish_reason, finish::length);
  EXPECT_EQ(redacted.tokens.size(), 40u);  // the tokens are the model's; only the text changed

  // A filter that ends the stream: the text before the phrase, finish_reason "filtered".
  next.streamer.filters = {{"stop_on", {{"phrases", std::vector<std::string>{word}}, {"case_sensitive", true}}}};
  ASSERT_TRUE(p->reconfigure(next, test::changed_stages(p->config(), next)).ok());
  auto stopped = c.submit(test::prompt_spec(prompt, 40))->wait(10s);
  ASSERT_TRUE(stopped.ok()) << stopped.error.message;
  EXPECT_EQ(stopped.finish_reason, finish::filtered);
  EXPECT_EQ(stopped.text, plain.substr(0, plain.find(word)));
  EXPECT_LT(stopped.usage.completion_tokens, 40);

  // Options a filter refuses, or an unknown admission policy: rejected whole, nothing changes.
  auto bad = next;
  bad.streamer.filters = {{"redact", {{"wordz", std::vector<std::string>{"x"}}}}};
  auto refused = p->reconfigure(bad, test::changed_stages(p->config(), bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("no option 'wordz'"), std::string::npos) << refused.error();
  bad = next;
  bad.admission.policy = "lottery";
  refused = p->reconfigure(bad, test::changed_stages(p->config(), bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("unknown admission policy 'lottery' (known policies and actors: "), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("token_bucket"), std::string::npos) << refused.error();
  EXPECT_EQ(c.submit(test::prompt_spec(prompt, 40))->wait(10s).finish_reason, finish::filtered);
  // An unchanged config replaces nothing.
  auto same = p->reconfigure(next, test::changed_stages(p->config(), next));
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->empty());
}

TEST(pipeline_filters, a_stream_running_across_the_swap_keeps_its_filters) {
  runtime rt;
  fake_options fo;
  fo.step_us = 3000;  // the stream is still running when the swap lands
  auto cfg = base_config();
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  const std::string prompt = "long one";
  const std::string plain = test::fake_text(fo, prompt, 60);
  const std::string word = plain.substr(40, 2);
  auto running = c.submit(test::prompt_spec(prompt, 60));
  auto e = running->next(10s);  // its first token: it runs
  ASSERT_TRUE(e && std::holds_alternative<token_event>(*e));
  auto next = cfg;
  next.streamer.filters = {redact(word)};
  ASSERT_TRUE(p->reconfigure(next, test::changed_stages(p->config(), next)).ok());
  auto later = c.submit(test::prompt_spec(prompt, 60));
  auto old_out = running->wait(30s);
  auto new_out = later->wait(30s);
  ASSERT_TRUE(old_out.ok()) << old_out.error.message;
  ASSERT_TRUE(new_out.ok()) << new_out.error.message;
  EXPECT_EQ(std::get<token_event>(*e).text + old_out.text, plain);
  EXPECT_EQ(new_out.text, replace_all(plain, word, "<R>"));
}

TEST(pipeline_filters, the_admission_policy_is_swapped_by_name_and_keeps_its_state_otherwise) {
  runtime rt;
  fake_options fo;
  auto cfg = base_config();
  cfg.admission.tenants["t"] = tenant_limits{0.001, 1, 0, 0};  // one request, then a long wait
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto s = test::prompt_spec("x", 2);
  s.tenant = "t";
  EXPECT_TRUE(c.submit(s)->wait(10s).ok());
  EXPECT_EQ(c.submit(s)->wait(10s).error.code, errc::rate_limited);
  // New limits for the same policy: its buckets stay (still empty).
  auto next = cfg;
  next.admission.max_pending = 100;
  auto r = p->reconfigure(next, test::changed_stages(p->config(), next));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, std::vector<std::string>{"admission"});
  EXPECT_EQ(c.submit(s)->wait(10s).error.code, errc::rate_limited);
  // Options token_bucket does not take: refused, and the running policy stays.
  next.admission.policy_options["rate"] = 2.0;
  auto refused = p->reconfigure(next, test::changed_stages(p->config(), next));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("no option 'rate'"), std::string::npos) << refused.error();
  EXPECT_EQ(c.submit(s)->wait(10s).error.code, errc::rate_limited);
}

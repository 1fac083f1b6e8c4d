// Output filters: the built-in "redact" and "stop_on" on text cut into pieces the way tokens cut
// it, the chain's order and flushing, option checking, and the streamer applying filters (text
// after stop strings, a filter ending a stream, new filters for new streams only).
#include "actors/streamer/filters/stream_filter.hpp"

#include <gtest/gtest.h>

#include "actors/streamer/streamer_state.hpp"
#include "tests/support/filter_feed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::bytes_of;
using troupe::test::feed;

namespace {

std::unique_ptr<stream_filter> make(const std::string& name, const option_map& o) {
  auto f = stream_filter_registry().find(name);
  EXPECT_TRUE(f.ok()) << f.error();
  auto m = f.value()(o);
  EXPECT_TRUE(m.ok()) << m.error();
  return m.value()(filter_context{1, "default", 3});
}

option_map words(std::vector<std::string> w) { return option_map{{"words", std::move(w)}}; }

}  // namespace

TEST(redact_filter, replaces_whole_words_split_over_pieces_in_any_case) {
  auto f = make("redact", words({"secret", "pass word"}));
  auto r = feed(*f, {"The Sec", "ret is: pa", "ss", " wo", "rd, not secrets or a secret."});
  EXPECT_EQ(r.text, "The [redacted] is: [redacted], not secrets or a [redacted].");
  EXPECT_FALSE(r.end.end);
}

TEST(redact_filter, byte_by_byte_gives_the_same_text) {
  const std::string in = "secret,secret secretive xsecret SECRET";
  auto a = make("redact", words({"secret"}));
  auto b = make("redact", words({"secret"}));
  EXPECT_EQ(feed(*a, {in}).text, feed(*b, bytes_of(in)).text);
  EXPECT_EQ(feed(*make("redact", words({"secret"})), bytes_of(in)).text,
            "[redacted],[redacted] secretive xsecret [redacted]");
}

TEST(redact_filter, holds_back_only_what_may_become_a_word) {
  auto f = make("redact", words({"secret"}));
  std::string p = "a se";
  f->on_text(p);
  EXPECT_EQ(p, "a ");  // "se" may begin "secret"
  p = "a";
  f->on_text(p);
  EXPECT_EQ(p, "sea");  // it did not
  p = " secret";
  f->on_text(p);
  EXPECT_EQ(p, " ");  // the next byte decides whether the word ends here
  std::string held;
  f->on_end(held);
  EXPECT_EQ(held, "[redacted]");  // the end of the stream ends the word
}

TEST(redact_filter, options_case_sensitivity_inner_words_and_replacement) {
  option_map o = words({"cat"});
  o["case_sensitive"] = true;
  o["whole_words"] = false;
  o["replacement"] = std::string("***");
  EXPECT_EQ(feed(*make("redact", o), bytes_of("Cat concatenate cat")).text, "Cat con***enate ***");
  o["replacement"] = std::string();
  EXPECT_EQ(feed(*make("redact", o), {"a cat b"}).text, "a  b");
}

TEST(redact_filter, keeps_multibyte_text_intact) {
  auto f = make("redact", words({"héllo"}));
  const std::string in = "héllo wörld héllo";
  EXPECT_EQ(feed(*f, bytes_of(in)).text, "[redacted] wörld [redacted]");
}

TEST(redact_filter, refuses_bad_options_naming_the_key) {
  auto f = stream_filter_registry().find("redact");
  ASSERT_TRUE(f.ok());
  auto none = f.value()({});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("option 'words'"), std::string::npos) << none.error();
  auto typo = f.value()(option_map{{"words", std::vector<std::string>{"x"}}, {"replacment", std::string("-")}});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.error().find("no option 'replacment'"), std::string::npos) << typo.error();
  EXPECT_NE(typo.error().find("replacement"), std::string::npos) << typo.error();  // the keys it has
  auto type = f.value()(option_map{{"words", int64_t{3}}});
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.error().find("expected a list of strings, got an integer"), std::string::npos) << type.error();
}

TEST(stop_on_filter, ends_before_the_phrase_even_when_it_is_split) {
  auto f = make("stop_on", option_map{{"phrases", std::vector<std::string>{"BEGIN KEY"}}});
  auto r = feed(*f, {"ok then be", "gin k", "ey and more"});
  EXPECT_TRUE(r.end.end);
  EXPECT_EQ(r.end.finish_reason, finish::filtered);
  EXPECT_EQ(r.text, "ok then ");
}

TEST(stop_on_filter, releases_a_partial_phrase_at_the_end_and_takes_a_finish_reason) {
  option_map o{{"phrases", std::vector<std::string>{"stop here"}}, {"finish_reason", std::string("content_filter")}};
  auto r = feed(*make("stop_on", o), {"please stop", " he"});
  EXPECT_FALSE(r.end.end);
  EXPECT_EQ(r.text, "please stop he");
  auto r2 = feed(*make("stop_on", o), bytes_of("x stop here y"));
  EXPECT_TRUE(r2.end.end);
  EXPECT_EQ(r2.end.finish_reason, "content_filter");
  EXPECT_EQ(r2.text, "x ");
}

TEST(filter_chain, runs_in_order_and_flushes_the_filters_after_one_that_ends) {
  auto chain = filter_chain_maker::make({{"redact", words({"red"})},
                                         {"stop_on", option_map{{"phrases", std::vector<std::string>{"[redacted] car"}}}}});
  ASSERT_TRUE(chain.ok()) << chain.error();
  EXPECT_EQ(chain.value()->names(), (std::vector<std::string>{"redact", "stop_on"}));
  auto fs = chain.value()->make_chain({});
  std::string t = "a red";
  EXPECT_FALSE(run_filters(fs, t, false).end);
  EXPECT_EQ(t, "a ");
  t = " car!";
  auto d = run_filters(fs, t, false);
  EXPECT_TRUE(d.end);  // the second filter saw the first one's output
  EXPECT_EQ(t, "");
}

TEST(filter_chain, names_an_unknown_filter_and_its_place) {
  auto chain = filter_chain_maker::make({{"redact", words({"x"})}, {"no_such_filter", {}}});
  ASSERT_FALSE(chain.ok());
  EXPECT_NE(chain.error().find("streamer.filters[1]"), std::string::npos) << chain.error();
  EXPECT_NE(chain.error().find("unknown stream filter 'no_such_filter'"), std::string::npos) << chain.error();
  EXPECT_NE(chain.error().find("redact, stop_on"), std::string::npos) << chain.error();
}

// --- in the streamer ------------------------------------------------------------------------

namespace {

stream_open open_msg(uint64_t id, std::vector<std::string> stop = {}) {
  stream_open o;
  o.id = id;
  o.arrival_us = 1000;
  o.prompt_tokens = 4;
  o.stop = std::move(stop);
  o.tenant = "alice";
  return o;
}

step_output toks(uint64_t id, const std::string& text) {
  step_output o;
  for (unsigned char c : text) o.tokens.push_back({id, c, 0.0f, {}});
  return o;
}

step_output fin(uint64_t id, const std::string& reason) {
  step_output o;
  seq_finished f;
  f.id = id;
  f.reason = reason;
  o.finished.push_back(f);
  return o;
}

struct streamed {
  std::string text;
  int tokens = 0;
  std::string finish_reason;
};

streamed collect(const streamer_effects& fx, uint64_t id) {
  streamed s;
  for (const auto& e : fx.events) {
    if (auto* t = std::get_if<token_event>(&e); t && t->request_id == id) {
      s.text += t->text;
      ++s.tokens;
    } else if (auto* d = std::get_if<done_event>(&e); d && d->request_id == id) {
      s.text += d->text;
      s.finish_reason = d->finish_reason;
    }
  }
  return s;
}

streamer_config with_filters(std::vector<filter_spec> f) {
  streamer_config c;
  c.buffer_tokens = 0;
  c.filters = std::move(f);
  return c;
}

}  // namespace

TEST(streamer_filters, redact_applies_to_the_text_after_stop_strings) {
  streamer_state s(with_filters({{"redact", words({"token"})}}), make_byte_codec());
  s.open(open_msg(1, {"END"}));
  s.on_output(toks(1, "my token is Token42 and token END more"), 2000);
  auto c = collect(s.take_effects(), 1);
  EXPECT_EQ(c.text, "my [redacted] is Token42 and [redacted] ");
  EXPECT_EQ(c.finish_reason, finish::stop);
  EXPECT_EQ(c.tokens, 33);  // every token up to the stop string has its event, some with empty text
}

TEST(streamer_filters, a_filter_ending_the_stream_drops_the_sequence_and_counts_its_tokens) {
  streamer_state s(with_filters({{"stop_on", option_map{{"phrases", std::vector<std::string>{"password"}}}}}),
                   make_byte_codec());
  s.open(open_msg(7));
  s.on_output(toks(7, "the password is hunter2"), 2000);
  auto fx = s.take_effects();
  auto c = collect(fx, 7);
  EXPECT_EQ(c.text, "the ");
  EXPECT_EQ(c.finish_reason, finish::filtered);
  EXPECT_EQ(c.tokens, 12);  // up to the token that completed the phrase
  ASSERT_EQ(fx.drop.size(), 1u);
  EXPECT_EQ(fx.drop[0], 7u);
  ASSERT_EQ(fx.closed.size(), 1u);
  EXPECT_EQ(fx.closed[0].finish_reason, finish::filtered);
  EXPECT_TRUE(fx.closed[0].filtered);  // the cache does not store a cut answer
  EXPECT_FALSE(s.is_open(7));
}

TEST(streamer_filters, held_back_text_comes_out_at_the_end_but_not_on_cancel) {
  streamer_state s(with_filters({{"redact", words({"secret"})}}), make_byte_codec());
  s.open(open_msg(1));
  s.open(open_msg(2));
  s.on_output(toks(1, "a sec"), 2000);
  s.on_output(toks(2, "a sec"), 2000);
  s.on_output(fin(1, finish::length), 3000);
  s.cancel(2, 3000);
  auto fx = s.take_effects();
  EXPECT_EQ(collect(fx, 1).text, "a sec");
  EXPECT_EQ(collect(fx, 2).text, "a ");
  EXPECT_EQ(collect(fx, 2).finish_reason, finish::cancelled);
}

TEST(streamer_filters, new_filters_reach_new_streams_only) {
  streamer_state s(with_filters({}), make_byte_codec());
  s.open(open_msg(1));
  auto chain = filter_chain_maker::make({{"redact", words({"b"})}});
  ASSERT_TRUE(chain.ok());
  s.set_filters(chain.value(), {{"redact", words({"b"})}});
  s.open(open_msg(2));
  s.on_output(toks(1, "a b c"), 2000);
  s.on_output(toks(2, "a b c"), 2000);
  s.on_output(fin(1, finish::length), 3000);
  s.on_output(fin(2, finish::length), 3000);
  auto fx = s.take_effects();
  EXPECT_EQ(collect(fx, 1).text, "a b c");
  EXPECT_EQ(collect(fx, 2).text, "a [redacted] c");
  EXPECT_EQ(s.config().filters.size(), 1u);
}

TEST(streamer_filters, filters_that_do_not_build_fail_streams_rather_than_let_text_out) {
  streamer_state s(with_filters({{"no_such_filter", {}}}), make_byte_codec());
  s.open(open_msg(1));
  auto fx = s.take_effects();
  bool failed = false;
  for (const auto& e : fx.events)
    if (auto* err = std::get_if<error_event>(&e)) failed = err->code == errc::internal;
  EXPECT_TRUE(failed);
  EXPECT_FALSE(s.is_open(1));
}

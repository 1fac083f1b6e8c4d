// net/completion_assembly without sockets: hand-made pipeline events in, the steps the HTTP
// session carries out out (SSE events, whole answers, errors), checked in the JSON they carry.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include <simdjson.h>

#include "net/completion_assembly.hpp"
#include "tests/net/assembly_support.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::net::test::doc;
using troupe::net::test::fake_inference;
using troupe::net::test::valid_json;

namespace {

// The JSON of one SSE event ("data: <json>\n\n").
std::string sse_json(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_GE(event.size(), 8u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  return event.substr(6, event.size() - 8);
}

size_t size_of(simdjson::dom::element e) { return simdjson::dom::array(e).size(); }
std::string str(simdjson::dom::element e) { return std::string(std::string_view(e)); }

openai_request request(bool stream, int32_t n = 1) {
  openai_request r;
  r.stream = stream;
  r.n = n;
  r.spec.prompt = "Say hi";
  return r;
}

actors::token_event token(int32_t id, std::string text, float logprob = -0.5f) {
  actors::token_event t;
  t.request_id = 1;
  t.token = id;
  t.text = std::move(text);
  t.logprob = logprob;
  return t;
}

actors::done_event done(const char* reason, std::string text = {}, actors::usage_info usage = {}) {
  actors::done_event d;
  d.request_id = 1;
  d.finish_reason = reason;
  d.text = std::move(text);
  d.usage = usage;
  return d;
}

actors::usage_info usage(int32_t prompt, int32_t completion, int32_t cached = 0, int32_t proposed = 0,
                         int32_t accepted = 0) {
  actors::usage_info u;
  u.prompt_tokens = prompt;
  u.completion_tokens = completion;
  u.cached_prompt_tokens = cached;
  u.speculative_proposed = proposed;
  u.speculative_accepted = accepted;
  return u;
}

// A step that asks nothing of the session.
void expect_quiet(const completion_assembly::step& s) {
  EXPECT_FALSE(s.open_stream);
  EXPECT_TRUE(s.events.empty());
  EXPECT_FALSE(s.end_stream);
  EXPECT_FALSE(s.answer);
  EXPECT_FALSE(s.error);
  EXPECT_FALSE(s.cancel);
}

// An id as new_completion_id makes it: `kind`, this process's 16 hex digits, a count.
bool is_completion_id(const std::string& id, const std::string& kind) {
  return std::regex_match(id, std::regex(kind + "-[0-9a-f]{16}-[0-9]+"));
}

// What a tool call's id is made of: the completion id after its kind ("3f9c0a1b2c4d5e6f-12").
std::string id_tail(const std::string& id) { return id.substr(id.find('-') + 1); }

const char* tool_call_text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";

}  // namespace

TEST(completion_assembly, a_whole_answer_has_the_text_and_finish_reason) {
  fake_inference inf;
  completion_assembly a;
  ASSERT_FALSE(a.begin(request(false), false, 1700000000, inf));
  EXPECT_FALSE(a.streaming());
  expect_quiet(a.feed(0, token(1, "He")));
  expect_quiet(a.feed(0, token(2, "llo")));
  EXPECT_FALSE(a.ended());
  auto s = a.feed(0, done(actors::finish::length, "", usage(5, 2)));
  ASSERT_TRUE(s.answer);
  EXPECT_FALSE(s.open_stream);
  EXPECT_TRUE(s.events.empty());
  EXPECT_FALSE(s.cancel);
  EXPECT_TRUE(a.ended());
  doc d(*s.answer);
  EXPECT_EQ(str(d["id"]), a.head().id);
  EXPECT_TRUE(is_completion_id(a.head().id, "cmpl")) << a.head().id;
  EXPECT_EQ(str(d["object"]), "text_completion");
  EXPECT_EQ(int64_t(d["created"]), 1700000000);
  EXPECT_EQ(str(d["model"]), "fake-model");  // the request named none
  ASSERT_EQ(size_of(d["choices"]), 1u);
  EXPECT_EQ(str(d["choices"].at(0)["text"]), "Hello");
  EXPECT_EQ(str(d["choices"].at(0)["finish_reason"]), "length");
  EXPECT_TRUE(d["choices"].at(0)["logprobs"].is_null());
  EXPECT_EQ(int64_t(d["usage"]["total_tokens"]), 7);
  // A late event (a choice cancelled with its siblings) is not taken.
  EXPECT_FALSE(a.accepts(0));
  expect_quiet(a.feed(0, token(7, "!")));

  // Chat: the model as the client named it, the text as the message's content.
  auto chat = request(false);
  chat.model = "my-model";
  ASSERT_FALSE(a.begin(chat, true, 1, inf));
  EXPECT_FALSE(a.ended());
  expect_quiet(a.feed(0, token(1, "He")));
  auto c = a.feed(0, done(actors::finish::stop, "llo"));
  ASSERT_TRUE(c.answer);
  doc cd(*c.answer);
  EXPECT_EQ(str(cd["object"]), "chat.completion");
  EXPECT_EQ(str(cd["model"]), "my-model");
  EXPECT_EQ(str(cd["choices"].at(0)["message"]["role"]), "assistant");
  EXPECT_EQ(str(cd["choices"].at(0)["message"]["content"]), "Hello");
  EXPECT_EQ(str(cd["choices"].at(0)["finish_reason"]), "stop");
}

// The stream opens (head, then each choice's role chunk) before the first text; chunks follow in
// order with their choice's index; the end is the finish chunks, the usage chunk, then [DONE].
TEST(completion_assembly, streamed_chunks_come_in_order_with_their_index) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(true, 2);
  req.include_usage = true;
  ASSERT_FALSE(a.begin(req, true, 1, inf));
  EXPECT_TRUE(is_completion_id(a.head().id, "chatcmpl")) << a.head().id;
  EXPECT_TRUE(a.streaming());
  EXPECT_EQ(a.size(), 2u);
  EXPECT_FALSE(a.stream_open());

  // A token with no text yet (held back by the streamer) writes nothing; choice 0's first event
  // lets the others start.
  auto s0 = a.feed(0, token(5, ""));
  EXPECT_TRUE(s0.submit_others);
  EXPECT_FALSE(s0.open_stream);
  EXPECT_TRUE(s0.events.empty());

  auto s1 = a.feed(0, token(1, "He"));
  EXPECT_FALSE(s1.submit_others);
  EXPECT_TRUE(s1.open_stream);
  EXPECT_TRUE(a.stream_open());
  ASSERT_EQ(s1.events.size(), 3u);
  for (int k = 0; k < 2; ++k) {
    doc role(sse_json(s1.events[k]));
    EXPECT_EQ(str(role["object"]), "chat.completion.chunk");
    EXPECT_EQ(str(role["id"]), a.head().id);
    EXPECT_EQ(int64_t(role["choices"].at(0)["index"]), k);
    EXPECT_EQ(str(role["choices"].at(0)["delta"]["role"]), "assistant");
    EXPECT_EQ(str(role["choices"].at(0)["delta"]["content"]), "");
  }
  doc he(sse_json(s1.events[2]));
  EXPECT_EQ(int64_t(he["choices"].at(0)["index"]), 0);
  EXPECT_EQ(str(he["choices"].at(0)["delta"]["content"]), "He");
  EXPECT_TRUE(he["choices"].at(0)["finish_reason"].is_null());

  auto s2 = a.feed(1, token(7, "!"));
  EXPECT_FALSE(s2.open_stream);  // once
  ASSERT_EQ(s2.events.size(), 1u);
  doc bang(sse_json(s2.events[0]));
  EXPECT_EQ(int64_t(bang["choices"].at(0)["index"]), 1);
  EXPECT_EQ(str(bang["choices"].at(0)["delta"]["content"]), "!");

  // Choice 1 ends: its finish chunk, and the stream goes on for choice 0.
  auto s3 = a.feed(1, done(actors::finish::stop, "", usage(4, 1)));
  ASSERT_EQ(s3.events.size(), 1u);
  EXPECT_FALSE(s3.end_stream);
  doc fin1(sse_json(s3.events[0]));
  EXPECT_EQ(int64_t(fin1["choices"].at(0)["index"]), 1);
  EXPECT_EQ(str(fin1["choices"].at(0)["finish_reason"]), "stop");
  EXPECT_FALSE(a.accepts(1));

  // Choice 0 ends with held text released: the text, its finish chunk, the usage, the end.
  auto s4 = a.feed(0, done(actors::finish::length, "llo", usage(4, 3)));
  ASSERT_EQ(s4.events.size(), 3u);
  EXPECT_TRUE(s4.end_stream);
  EXPECT_FALSE(s4.answer);
  doc llo(sse_json(s4.events[0]));
  EXPECT_EQ(str(llo["choices"].at(0)["delta"]["content"]), "llo");
  doc fin0(sse_json(s4.events[1]));
  EXPECT_EQ(int64_t(fin0["choices"].at(0)["index"]), 0);
  EXPECT_EQ(str(fin0["choices"].at(0)["finish_reason"]), "length");
  doc use(sse_json(s4.events[2]));
  EXPECT_EQ(size_of(use["choices"]), 0u);
  EXPECT_EQ(int64_t(use["usage"]["prompt_tokens"]), 4);
  EXPECT_EQ(int64_t(use["usage"]["completion_tokens"]), 4);
  EXPECT_TRUE(a.ended());
}

// n = 2: the prompt counted once (choice 0's, with its cached share), the completions and their
// speculation summed.
TEST(completion_assembly, usage_of_several_choices_is_summed) {
  fake_inference inf;
  completion_assembly a;
  ASSERT_FALSE(a.begin(request(false, 2), false, 1, inf));
  EXPECT_TRUE(a.feed(0, token(1, "He")).submit_others);
  EXPECT_FALSE(a.feed(0, token(2, "llo")).submit_others);
  expect_quiet(a.feed(1, token(7, "!")));
  expect_quiet(a.feed(0, done(actors::finish::stop, "", usage(10, 3, 4, 5, 2))));
  auto s = a.feed(1, done(actors::finish::length, "", usage(10, 4, 10, 6, 3)));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  ASSERT_EQ(size_of(d["choices"]), 2u);
  EXPECT_EQ(int64_t(d["choices"].at(0)["index"]), 0);
  EXPECT_EQ(str(d["choices"].at(0)["text"]), "Hello");
  EXPECT_EQ(str(d["choices"].at(0)["finish_reason"]), "stop");
  EXPECT_EQ(int64_t(d["choices"].at(1)["index"]), 1);
  EXPECT_EQ(str(d["choices"].at(1)["text"]), "!");
  EXPECT_EQ(str(d["choices"].at(1)["finish_reason"]), "length");
  EXPECT_EQ(int64_t(d["usage"]["prompt_tokens"]), 10);
  EXPECT_EQ(int64_t(d["usage"]["completion_tokens"]), 7);
  EXPECT_EQ(int64_t(d["usage"]["total_tokens"]), 17);
  EXPECT_EQ(int64_t(d["usage"]["prompt_tokens_details"]["cached_tokens"]), 4);
  EXPECT_EQ(int64_t(d["usage"]["speculative"]["proposed"]), 11);
  EXPECT_EQ(int64_t(d["usage"]["speculative"]["accepted"]), 5);
}

// A batch of two prompts, n = 2: four choices, prompt p's being p * 2 and p * 2 + 1; the others
// start after choice 0's first token; each prompt counted once; `echo` puts each one's own text.
TEST(completion_assembly, a_batch_answers_each_prompt_with_its_choices) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(false, 2);
  req.echo = true;
  req.batch = {{"A:", {}}, {"B:", {}}};
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  ASSERT_EQ(a.size(), 4u);
  EXPECT_TRUE(a.feed(0, token(1, "x")).submit_others);
  for (size_t c = 1; c < 4; ++c) expect_quiet(a.feed(c, token(1, "y")));
  expect_quiet(a.feed(0, done(actors::finish::stop, "", usage(3, 1, 2))));
  expect_quiet(a.feed(1, done(actors::finish::stop, "", usage(3, 1, 3))));
  expect_quiet(a.feed(2, done(actors::finish::stop, "", usage(5, 1))));
  auto s = a.feed(3, done(actors::finish::stop, "", usage(5, 1)));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  ASSERT_EQ(size_of(d["choices"]), 4u);
  EXPECT_EQ(str(d["choices"].at(0)["text"]), "A:x");
  EXPECT_EQ(str(d["choices"].at(1)["text"]), "A:y");
  EXPECT_EQ(str(d["choices"].at(2)["text"]), "B:y");
  EXPECT_EQ(str(d["choices"].at(3)["text"]), "B:y");
  EXPECT_EQ(int64_t(d["usage"]["prompt_tokens"]), 8) << "3 + 5: each prompt once";
  EXPECT_EQ(int64_t(d["usage"]["completion_tokens"]), 4);
  EXPECT_EQ(int64_t(d["usage"]["prompt_tokens_details"]["cached_tokens"]), 2);
  // n = 1: two choices, the second submitted after the first's first token.
  completion_assembly b;
  req = request(false, 1);
  req.batch = {{"A:", {}}, {"B:", {}}};
  ASSERT_FALSE(b.begin(req, false, 1, inf));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(b.feed(0, token(1, "x")).submit_others);
}

// A token whose text the streamer holds back keeps its logprob until the text comes out; a
// final text cut to nothing (a stop string) drops them, so the logprobs cover the text returned.
TEST(completion_assembly, logprobs_are_held_with_their_text) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(false);
  req.logprobs = true;

  // Held, released by the next token's text; then held and dropped with an empty final text.
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  a.feed(0, token(5, "", -0.25f));
  a.feed(0, token(6, "\xC3\xA9", -0.5f));
  a.feed(0, token(7, "", -1.0f));
  auto cut = a.feed(0, done(actors::finish::stop, ""));
  ASSERT_TRUE(cut.answer);
  doc d(*cut.answer);
  EXPECT_EQ(str(d["choices"].at(0)["text"]), "\xC3\xA9");
  simdjson::dom::element lp = d["choices"].at(0)["logprobs"];
  ASSERT_EQ(size_of(lp["tokens"]), 2u);
  EXPECT_DOUBLE_EQ(double(lp["token_logprobs"].at(0)), -0.25);
  EXPECT_DOUBLE_EQ(double(lp["token_logprobs"].at(1)), -0.5);

  // Held, released with the final text.
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  a.feed(0, token(1, "He", -0.125f));
  a.feed(0, token(7, "", -2.0f));
  auto kept = a.feed(0, done(actors::finish::stop, "!"));
  ASSERT_TRUE(kept.answer);
  doc k(*kept.answer);
  EXPECT_EQ(str(k["choices"].at(0)["text"]), "He!");
  simdjson::dom::element klp = k["choices"].at(0)["logprobs"];
  ASSERT_EQ(size_of(klp["tokens"]), 2u);
  EXPECT_EQ(str(klp["tokens"].at(1)), "!");
  EXPECT_DOUBLE_EQ(double(klp["token_logprobs"].at(1)), -2.0);

  // Streamed: the held token writes nothing; its logprob rides on the chunk of the text that
  // releases it.
  req.stream = true;
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  auto held = a.feed(0, token(5, "", -0.25f));
  EXPECT_TRUE(held.events.empty());
  auto out = a.feed(0, token(6, "\xC3\xA9", -0.5f));
  ASSERT_EQ(out.events.size(), 1u);  // no echo, so no opening chunk for completions
  EXPECT_TRUE(out.open_stream);
  doc c(sse_json(out.events[0]));
  simdjson::dom::element clp = c["choices"].at(0)["logprobs"];
  ASSERT_EQ(size_of(clp["tokens"]), 2u);
  EXPECT_DOUBLE_EQ(double(clp["token_logprobs"].at(0)), -0.25);
  a.feed(0, token(7, "", -1.0f));
  auto end = a.feed(0, done(actors::finish::stop, ""));
  ASSERT_EQ(end.events.size(), 1u);  // only the finish chunk: the held logprob went with its text
  doc e(sse_json(end.events[0]));
  EXPECT_TRUE(e["choices"].at(0)["logprobs"].is_null());
  EXPECT_EQ(str(e["choices"].at(0)["finish_reason"]), "stop");
}

// A stop string that starts inside a token: the answer ends with the token's kept bytes, and so
// does its logprob entry (the pieces add up to the text, streamed or not).
TEST(completion_assembly, a_stop_string_inside_a_token_cuts_its_logprob_entry) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(false);
  req.logprobs = true;
  // " world": the streamer released " wo" and held "rld"; then the stop string "rld!" matched.
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  a.feed(0, token(1, "He", -0.125f));
  a.feed(0, token(4, " wo", -0.5f));
  a.feed(0, token(7, "", -1.0f));
  auto whole = a.feed(0, done(actors::finish::stop, ""));
  ASSERT_TRUE(whole.answer);
  doc d(*whole.answer);
  EXPECT_EQ(str(d["choices"].at(0)["text"]), "He wo");
  simdjson::dom::element lp = d["choices"].at(0)["logprobs"];
  ASSERT_EQ(size_of(lp["tokens"]), 2u);
  EXPECT_EQ(str(lp["tokens"].at(1)), " wo");
  EXPECT_DOUBLE_EQ(double(lp["token_logprobs"].at(1)), -0.5);

  // Streamed: " wo" only starts its token, so it waits for the token's entry and both go out
  // in the last chunk (a chunk carries the entries of the text it brings).
  req.stream = true;
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  a.feed(0, token(1, "He", -0.125f));
  auto part = a.feed(0, token(4, " wo", -0.5f));
  EXPECT_EQ(part.events.size(), 0u);
  a.feed(0, token(7, "", -1.0f));
  auto end = a.feed(0, done(actors::finish::stop, ""));
  ASSERT_EQ(end.events.size(), 2u);
  doc e(sse_json(end.events[0]));
  EXPECT_EQ(str(e["choices"].at(0)["text"]), " wo");
  simdjson::dom::element elp = e["choices"].at(0)["logprobs"];
  ASSERT_EQ(size_of(elp["tokens"]), 1u);
  EXPECT_EQ(str(elp["tokens"].at(0)), " wo");
  EXPECT_EQ(int64_t(elp["text_offset"].at(0)), 2);
}

// Completions' text_offset counts characters (not bytes), from the end of the echoed prompt.
TEST(completion_assembly, text_offset_counts_characters_after_the_echo) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(true);
  req.logprobs = true;
  req.echo = true;
  req.spec.prompt = "\xC3\x87" "a va";  // "Ça va": 5 characters, 6 bytes
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  auto s1 = a.feed(0, token(3, "\xC3\xA9"));
  ASSERT_EQ(s1.events.size(), 2u);
  doc echo(sse_json(s1.events[0]));
  EXPECT_EQ(str(echo["choices"].at(0)["text"]), "\xC3\x87" "a va");
  doc e1(sse_json(s1.events[1]));
  EXPECT_EQ(int64_t(e1["choices"].at(0)["logprobs"]["text_offset"].at(0)), 5);
  auto s2 = a.feed(0, token(4, " world"));
  ASSERT_EQ(s2.events.size(), 1u);
  doc e2(sse_json(s2.events[0]));
  EXPECT_EQ(int64_t(e2["choices"].at(0)["logprobs"]["text_offset"].at(0)), 6);  // é is one character
  auto s3 = a.feed(0, token(7, "!"));
  doc e3(sse_json(s3.events[0]));
  EXPECT_EQ(int64_t(e3["choices"].at(0)["logprobs"]["text_offset"].at(0)), 12);

  // The whole answer: the echoed prompt before the text, the offsets the same.
  req.stream = false;
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  a.feed(0, token(3, "\xC3\xA9"));
  a.feed(0, token(4, " world"));
  auto s = a.feed(0, done(actors::finish::stop));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  EXPECT_EQ(str(d["choices"].at(0)["text"]), "\xC3\x87" "a va\xC3\xA9 world");
  simdjson::dom::element offsets = d["choices"].at(0)["logprobs"]["text_offset"];
  ASSERT_EQ(size_of(offsets), 2u);
  EXPECT_EQ(int64_t(offsets.at(0)), 5);
  EXPECT_EQ(int64_t(offsets.at(1)), 6);
}

// A deadline that passed before the first token is a 504 (a 200 with no text would read as an
// empty answer) for one choice; with n > 1 the others' text stands.
TEST(completion_assembly, a_deadline_before_the_first_token_is_504_for_one_choice) {
  fake_inference inf;
  completion_assembly a;
  for (bool stream : {false, true}) {
    ASSERT_FALSE(a.begin(request(stream), true, 1, inf));
    auto s = a.feed(0, done(actors::finish::deadline, "", usage(5, 0)));
    ASSERT_TRUE(s.error) << stream;
    EXPECT_EQ(s.error->status, 504);
    EXPECT_EQ(s.error->code, "deadline");
    EXPECT_NE(s.error->message.find("deadline_ms"), std::string::npos) << s.error->message;
    EXPECT_TRUE(s.cancel);
    EXPECT_FALSE(s.open_stream);
    EXPECT_TRUE(s.events.empty());
    EXPECT_EQ(s.retry_after_s, 0);
    EXPECT_TRUE(a.ended());
  }

  // After a token the deadline is a finish reason like any other.
  ASSERT_FALSE(a.begin(request(false), true, 1, inf));
  a.feed(0, token(1, "He"));
  auto late = a.feed(0, done(actors::finish::deadline, "", usage(5, 1)));
  ASSERT_TRUE(late.answer);
  EXPECT_EQ(str(doc(*late.answer)["choices"].at(0)["finish_reason"]), "deadline");

  ASSERT_FALSE(a.begin(request(false, 2), true, 1, inf));
  a.feed(0, token(1, "He"));
  auto none = a.feed(1, done(actors::finish::deadline, "", usage(5, 0)));
  EXPECT_FALSE(none.error);
  EXPECT_FALSE(none.cancel);
  auto s = a.feed(0, done(actors::finish::stop, "", usage(5, 1)));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  EXPECT_EQ(str(d["choices"].at(0)["message"]["content"]), "He");
  EXPECT_EQ(str(d["choices"].at(1)["finish_reason"]), "deadline");
}

// A failure before anything was streamed is the HTTP answer (a 429 with its Retry-After in whole
// seconds, at least 1); after the stream's head, an SSE error event ends the stream.
TEST(completion_assembly, an_error_is_the_answer_or_ends_the_stream) {
  fake_inference inf;
  completion_assembly a;
  ASSERT_FALSE(a.begin(request(true, 2), false, 1, inf));
  actors::error_event busy{0, actors::errc::overloaded, "the queue is full", 1500};
  auto s = a.feed(0, busy);
  ASSERT_TRUE(s.error);
  EXPECT_FALSE(s.submit_others);  // choice 0 failed: the others never start
  EXPECT_TRUE(s.cancel);
  EXPECT_EQ(s.error->status, 429);
  EXPECT_EQ(s.error->type, "server_overloaded");
  EXPECT_EQ(s.retry_after_s, 2);
  EXPECT_TRUE(s.events.empty());
  EXPECT_FALSE(s.end_stream);
  EXPECT_TRUE(a.ended());
  expect_quiet(a.feed(1, token(1, "He")));  // a sibling's late event

  ASSERT_FALSE(a.begin(request(false), false, 1, inf));
  auto limited = a.feed(0, actors::error_event{0, actors::errc::rate_limited, "over the bucket", 0});
  ASSERT_TRUE(limited.error);
  EXPECT_EQ(limited.retry_after_s, 1);
  auto ctx = request(false);
  ASSERT_FALSE(a.begin(ctx, true, 1, inf));
  auto too_long = a.feed(0, actors::error_event{1, actors::errc::context_length, "too long", 0});
  ASSERT_TRUE(too_long.error);
  EXPECT_EQ(too_long.error->status, 400);
  EXPECT_EQ(too_long.error->param, "messages");  // chat's input field
  EXPECT_EQ(too_long.retry_after_s, 0);

  ASSERT_FALSE(a.begin(request(true), false, 1, inf));
  EXPECT_TRUE(a.feed(0, token(1, "He")).open_stream);
  auto mid = a.feed(0, actors::error_event{1, actors::errc::executor_fault, "the model step failed", 0});
  EXPECT_FALSE(mid.error);
  EXPECT_TRUE(mid.cancel);
  EXPECT_TRUE(mid.end_stream);
  ASSERT_EQ(mid.events.size(), 1u);
  doc e(sse_json(mid.events[0]));
  EXPECT_EQ(str(e["error"]["type"]), "server_error");
  EXPECT_EQ(str(e["error"]["code"]), "executor_fault");
  EXPECT_EQ(str(e["error"]["message"]), "the model step failed");
}

// A reply in the model's tool-call format (hermes here) is calls: finish_reason tool_calls,
// ids call_<completion id>_<choice>_<call>, content null without text.
TEST(completion_assembly, tool_calls_are_read_from_the_reply) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(false, 2);
  req.spec.tools.push_back({"f", "", R"({"type":"object"})"});
  ASSERT_FALSE(a.begin(req, true, 1, inf));
  const std::string call = tool_call_text;
  for (size_t i : {0, 1}) {
    a.feed(i, token(1, call.substr(0, 20)));
    a.feed(i, token(2, call.substr(20)));
  }
  a.feed(0, done(actors::finish::stop));
  auto s = a.feed(1, done(actors::finish::stop));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  for (size_t i : {0, 1}) {
    simdjson::dom::element ch = d["choices"].at(i);
    EXPECT_EQ(str(ch["finish_reason"]), "tool_calls");
    EXPECT_TRUE(ch["message"]["content"].is_null());
    ASSERT_EQ(size_of(ch["message"]["tool_calls"]), 1u);
    simdjson::dom::element tc = ch["message"]["tool_calls"].at(0);
    EXPECT_EQ(str(tc["id"]), "call_" + id_tail(a.head().id) + "_" + std::to_string(i) + "_0");
    EXPECT_EQ(str(tc["type"]), "function");
    EXPECT_EQ(str(tc["function"]["name"]), "f");
    doc args(str(tc["function"]["arguments"]));
    EXPECT_EQ(int64_t(args["a"]), 1);
  }

  // Streamed: the call's id and name in its first chunk, then its arguments in pieces.
  req.stream = true;
  req.n = 1;
  ASSERT_FALSE(a.begin(req, true, 1, inf));
  std::vector<std::string> events;
  auto s1 = a.feed(0, token(1, call.substr(0, 20)));
  EXPECT_TRUE(s1.open_stream);  // a tool reply opens the stream at its first token
  auto s2 = a.feed(0, token(2, call.substr(20)));
  auto s3 = a.feed(0, done(actors::finish::stop));
  EXPECT_TRUE(s3.end_stream);
  for (auto* st : {&s1, &s2, &s3}) events.insert(events.end(), st->events.begin(), st->events.end());
  ASSERT_GE(events.size(), 3u);
  doc role(sse_json(events.front()));
  EXPECT_EQ(str(role["choices"].at(0)["delta"]["role"]), "assistant");
  std::string id, name, arguments;
  for (size_t k = 1; k + 1 < events.size(); ++k) {
    doc c(sse_json(events[k]));
    simdjson::dom::element tcs = c["choices"].at(0)["delta"]["tool_calls"];
    ASSERT_EQ(size_of(tcs), 1u) << c.text;
    auto tc = tcs.at(0);
    EXPECT_EQ(int64_t(tc["index"]), 0);
    if (k == 1) {
      id = str(tc["id"]);
      name = str(tc["function"]["name"]);
    }
    arguments += str(tc["function"]["arguments"]);
  }
  EXPECT_EQ(id, "call_" + id_tail(a.head().id) + "_0_0");
  EXPECT_EQ(name, "f");
  doc args(arguments);
  EXPECT_EQ(int64_t(args["a"]), 1);
  doc fin(sse_json(events.back()));
  EXPECT_EQ(str(fin["choices"].at(0)["finish_reason"]), "tool_calls");
}

// A logit_bias id outside the vocabulary is refused by name before anything starts.
TEST(completion_assembly, a_logit_bias_outside_the_vocabulary_is_refused) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(false);
  req.spec.sampling.logit_bias.push_back({100, 5.0f});
  const std::string before = new_completion_id(true);
  auto e = a.begin(req, true, 1, inf);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "logit_bias.100");
  EXPECT_NE(e->message.find("0..99"), std::string::npos) << e->message;
  EXPECT_EQ(a.size(), 0u);
  req.spec.sampling.logit_bias = {{99, 5.0f}};
  EXPECT_FALSE(a.begin(req, true, 1, inf));
  EXPECT_EQ(a.size(), 1u);
  // The refused request took no id: ids count the completions that started.
  auto count = [](const std::string& id) { return std::stoll(id.substr(id.rfind('-') + 1)); };
  EXPECT_EQ(count(a.head().id), count(before) + 1);
}

TEST(completion_assembly, completion_ids_are_prefixed_and_never_repeat) {
  const auto a = new_completion_id(true), b = new_completion_id(true), c = new_completion_id(false);
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u) << a;
  EXPECT_EQ(c.rfind("cmpl-", 0), 0u) << c;
  EXPECT_NE(a, b);
  // The same process prefix, a different count.
  EXPECT_EQ(a.substr(0, a.rfind('-')), b.substr(0, b.rfind('-')));
}

// As OpenAI's legacy API: the sampled token is always among a position's top_logprobs (up to
// logprobs + 1 of them), also with logprobs = 0 (then it alone).
TEST(completion_assembly, the_sampled_token_is_among_its_top_logprobs) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(false);
  req.logprobs = true;
  ASSERT_FALSE(a.begin(req, false, 1, inf));
  auto sampled = token(1, "He", -2.5f);  // drawn at temperature 1, not the likeliest
  sampled.top = {{4, -0.25f}};
  a.feed(0, sampled);
  auto likeliest = token(4, " world", -0.25f);
  likeliest.top = {{4, -0.25f}};  // already there: not twice
  a.feed(0, likeliest);
  a.feed(0, token(7, "!", -0.75f));  // logprobs = 0: no alternatives asked for
  auto whole = a.feed(0, done(actors::finish::length, ""));
  ASSERT_TRUE(whole.answer);
  doc d(*whole.answer);
  simdjson::dom::element top = d["choices"].at(0)["logprobs"]["top_logprobs"];
  ASSERT_EQ(size_of(top), 3u);
  EXPECT_EQ(simdjson::dom::object(top.at(0)).size(), 2u);
  EXPECT_DOUBLE_EQ(double(top.at(0)[" world"]), -0.25);
  EXPECT_DOUBLE_EQ(double(top.at(0)["He"]), -2.5);
  EXPECT_EQ(simdjson::dom::object(top.at(1)).size(), 1u);
  EXPECT_EQ(simdjson::dom::object(top.at(2)).size(), 1u);
  EXPECT_DOUBLE_EQ(double(top.at(2)["!"]), -0.75);
}

// A streamed reply of calls with logprobs: the markup's tokens come in chunks of logprobs only,
// with no `content` key (a client adding up `content` must end with null, as the whole answer
// says, not "").
TEST(completion_assembly, logprobs_of_a_calls_markup_come_without_content) {
  fake_inference inf;
  completion_assembly a;
  auto req = request(true);
  req.logprobs = true;
  req.spec.tools.push_back({"f", "", R"({"type":"object"})"});
  ASSERT_FALSE(a.begin(req, true, 1, inf));
  const std::string call = tool_call_text;
  std::vector<std::string> events;
  for (auto st : {a.feed(0, token(1, call.substr(0, 11))), a.feed(0, token(2, call.substr(11))),
                  a.feed(0, done(actors::finish::stop))})
    events.insert(events.end(), st.events.begin(), st.events.end());
  int with_logprobs = 0;
  for (size_t k = 1; k < events.size(); ++k) {
    doc c(sse_json(events[k]));
    simdjson::dom::element ch = c["choices"].at(0);
    EXPECT_TRUE(ch["delta"]["content"].error() == simdjson::NO_SUCH_FIELD) << c.text;
    if (!ch["logprobs"].is_null()) ++with_logprobs;
  }
  EXPECT_GE(with_logprobs, 1);
}

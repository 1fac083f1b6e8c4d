// net/responses_assembly without sockets: hand-made pipeline events in, the Responses API's
// response objects and typed SSE events out, checked in the JSON they carry.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <simdjson.h>

#include "net/responses_assembly.hpp"
#include "tests/net/assembly_support.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::net::test::doc;
using troupe::net::test::fake_inference;
using troupe::net::test::valid_json;

namespace {

std::string str(simdjson::dom::element e) { return std::string(std::string_view(e)); }
size_t size_of(simdjson::dom::element e) { return simdjson::dom::array(e).size(); }

responses_request request(bool stream) {
  responses_request r;
  r.chat.stream = stream;
  r.chat.max_tokens_field = "max_output_tokens";
  r.settings.instructions = "Be brief";
  r.settings.has_instructions = true;
  r.settings.metadata_json = R"({"k":"v"})";
  r.conversation = R"({"role":"user","content":"Say hi"})";
  return r;
}

actors::token_event token(int32_t id, std::string text) {
  actors::token_event t;
  t.request_id = 1;
  t.token = id;
  t.text = std::move(text);
  t.logprob = -0.5f;
  return t;
}

actors::done_event done(const char* reason, std::string text = {}, int32_t prompt = 5, int32_t completion = 2) {
  actors::done_event d;
  d.request_id = 1;
  d.finish_reason = reason;
  d.text = std::move(text);
  d.usage.prompt_tokens = prompt;
  d.usage.completion_tokens = completion;
  return d;
}

// The type and JSON of one typed SSE event ("event: <type>\ndata: <json>\n\n").
std::pair<std::string, std::string> typed(const std::string& ev) {
  EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
  const size_t nl = ev.find('\n');
  EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  return {ev.substr(7, nl - 7), ev.substr(nl + 7, ev.size() - nl - 9)};
}

const char* tool_call_text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";

}  // namespace

TEST(responses_assembly, a_whole_answer_is_the_response_object) {
  fake_inference inf;
  responses_assembly a;
  ASSERT_FALSE(a.begin(request(false), 42, inf));
  EXPECT_EQ(a.id().rfind("resp_", 0), 0u);
  EXPECT_FALSE(a.feed(0, token(1, "He")).answer);
  a.feed(0, token(2, "llo"));
  auto s = a.feed(0, done(actors::finish::stop));
  ASSERT_TRUE(s.answer);
  EXPECT_TRUE(a.ended() && a.answered());
  EXPECT_FALSE(a.done_line());
  doc d(*s.answer);
  EXPECT_EQ(str(d["id"]), a.id());
  EXPECT_EQ(str(d["object"]), "response");
  EXPECT_EQ(int64_t(d["created_at"]), 42);
  EXPECT_EQ(str(d["status"]), "completed");
  EXPECT_TRUE(d["incomplete_details"].is_null());
  EXPECT_EQ(str(d["model"]), "fake-model");
  EXPECT_EQ(str(d["instructions"]), "Be brief");
  EXPECT_EQ(str(d["metadata"]["k"]), "v");
  ASSERT_EQ(size_of(d["output"]), 1u);
  auto msg = d["output"].at(0);
  EXPECT_EQ(str(msg["type"]), "message");
  EXPECT_EQ(str(msg["role"]), "assistant");
  EXPECT_EQ(str(msg["status"]), "completed");
  EXPECT_EQ(str(msg["id"]).rfind("msg_", 0), 0u);
  EXPECT_EQ(str(msg["content"].at(0)["type"]), "output_text");
  EXPECT_EQ(str(msg["content"].at(0)["text"]), "Hello");
  EXPECT_EQ(int64_t(d["usage"]["input_tokens"]), 5);
  EXPECT_EQ(int64_t(d["usage"]["output_tokens"]), 2);
  EXPECT_EQ(int64_t(d["usage"]["total_tokens"]), 7);
  EXPECT_EQ(int64_t(d["usage"]["output_tokens_details"]["reasoning_tokens"]), 0);
  // What a later response continues from: the input, then this answer.
  EXPECT_EQ(a.stored_conversation(),
            R"({"role":"user","content":"Say hi"},{"role":"assistant","content":"Hello"})");
  EXPECT_EQ(a.response_json(), *s.answer);
  EXPECT_GT(int64_t(d["completed_at"]), 0);
}

TEST(responses_assembly, max_tokens_make_an_incomplete_response) {
  fake_inference inf;
  responses_assembly a;
  ASSERT_FALSE(a.begin(request(false), 1, inf));
  a.feed(0, token(1, "He"));
  auto s = a.feed(0, done(actors::finish::length));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  EXPECT_EQ(str(d["status"]), "incomplete");
  EXPECT_EQ(str(d["incomplete_details"]["reason"]), "max_output_tokens");
  EXPECT_EQ(str(d["output"].at(0)["status"]), "incomplete");
  EXPECT_TRUE(d["completed_at"].is_null());
}

// A forced call cut short by max_output_tokens: its item is incomplete, as OpenAI marks it (an
// agent must not run the tool with the part of its arguments written); a whole one is completed.
TEST(responses_assembly, a_call_cut_short_is_an_incomplete_item) {
  fake_inference inf;
  responses_assembly a;
  auto req = request(false);
  req.chat.spec.tools.push_back({"f", "", R"({"type":"object"})"});
  req.chat.spec.tool_choice = actors::tool_choice::required;
  ASSERT_FALSE(a.begin(req, 1, inf));
  a.feed(0, token(1, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": "));
  auto s = a.feed(0, done(actors::finish::length));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  EXPECT_EQ(str(d["status"]), "incomplete");
  ASSERT_EQ(size_of(d["output"]), 1u);
  EXPECT_EQ(str(d["output"].at(0)["type"]), "function_call");
  EXPECT_EQ(str(d["output"].at(0)["status"]), "incomplete");

  ASSERT_FALSE(a.begin(req, 1, inf));
  a.feed(0, token(1, tool_call_text));
  auto whole = a.feed(0, done(actors::finish::length));
  doc w(*whole.answer);
  EXPECT_EQ(str(w["output"].at(0)["status"]), "completed");
}

TEST(responses_assembly, streamed_events_are_typed_and_numbered_in_order) {
  fake_inference inf;
  responses_assembly a;
  ASSERT_FALSE(a.begin(request(true), 1, inf));
  std::vector<std::string> events;
  auto s1 = a.feed(0, token(1, "He"));
  EXPECT_TRUE(s1.open_stream);
  auto s2 = a.feed(0, token(2, "llo"));
  auto s3 = a.feed(0, done(actors::finish::stop, " world"));
  EXPECT_TRUE(s3.end_stream);
  for (auto* st : {&s1, &s2, &s3}) events.insert(events.end(), st->events.begin(), st->events.end());
  std::vector<std::string> types;
  std::string deltas;
  for (size_t i = 0; i < events.size(); ++i) {
    auto [type, json] = typed(events[i]);
    doc d(json);
    EXPECT_EQ(str(d["type"]), type);
    EXPECT_EQ(int64_t(d["sequence_number"]), static_cast<int64_t>(i));
    if (type == "response.output_text.delta") {
      deltas += str(d["delta"]);
      EXPECT_EQ(int64_t(d["output_index"]), 0);
      EXPECT_EQ(int64_t(d["content_index"]), 0);
    }
    if (type == "response.output_text.done") {
      EXPECT_EQ(str(d["text"]), "Hello world");
    }
    if (type == "response.created") {
      EXPECT_EQ(str(d["response"]["status"]), "in_progress");
      EXPECT_EQ(size_of(d["response"]["output"]), 0u);
      EXPECT_TRUE(d["response"]["usage"].is_null());
    }
    if (type == "response.completed") {
      EXPECT_EQ(str(d["response"]["output"].at(0)["content"].at(0)["text"]), "Hello world");
    }
    types.push_back(type);
  }
  EXPECT_EQ(deltas, "Hello world");
  const std::vector<std::string> want = {
      "response.created",           "response.in_progress",       "response.output_item.added",
      "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done",  "response.content_part.done",
      "response.output_item.done",  "response.completed"};
  EXPECT_EQ(types, want);
}

TEST(responses_assembly, function_calls_are_items) {
  fake_inference inf;
  responses_assembly a;
  auto req = request(false);
  req.chat.spec.tools.push_back({"f", "", R"({"type":"object"})"});
  ASSERT_FALSE(a.begin(req, 1, inf));
  const std::string call = tool_call_text;
  a.feed(0, token(1, call.substr(0, 20)));
  a.feed(0, token(2, call.substr(20)));
  auto s = a.feed(0, done(actors::finish::stop));
  ASSERT_TRUE(s.answer);
  doc d(*s.answer);
  EXPECT_EQ(str(d["status"]), "completed");
  ASSERT_EQ(size_of(d["output"]), 1u);
  auto fc = d["output"].at(0);
  EXPECT_EQ(str(fc["type"]), "function_call");
  EXPECT_EQ(str(fc["name"]), "f");
  EXPECT_EQ(str(fc["status"]), "completed");
  EXPECT_EQ(str(fc["call_id"]).rfind("call_", 0), 0u);
  EXPECT_EQ(str(fc["id"]).rfind("fc_", 0), 0u);
  doc args(str(fc["arguments"]));
  EXPECT_EQ(int64_t(args["a"]), 1);
  // Continued from, the call is the assistant's tool_calls (its output answers call_id).
  EXPECT_NE(a.stored_conversation().find(R"("tool_calls":[{"id":")" + str(fc["call_id"])), std::string::npos);

  // Streamed: the item (empty arguments), the arguments in pieces, their done, the item's done.
  req.chat.stream = true;
  ASSERT_FALSE(a.begin(req, 1, inf));
  std::vector<std::string> events;
  for (const auto& st : {a.feed(0, token(1, call.substr(0, 20))), a.feed(0, token(2, call.substr(20))),
                         a.feed(0, done(actors::finish::stop))})
    events.insert(events.end(), st.events.begin(), st.events.end());
  std::string arguments, done_arguments;
  std::vector<std::string> types;
  for (const auto& ev : events) {
    auto [type, json] = typed(ev);
    doc e(json);
    types.push_back(type);
    if (type == "response.output_item.added") {
      EXPECT_EQ(str(e["item"]["type"]), "function_call");
      EXPECT_EQ(str(e["item"]["arguments"]), "");
    }
    if (type == "response.function_call_arguments.delta") arguments += str(e["delta"]);
    if (type == "response.function_call_arguments.done") {
      done_arguments = str(e["arguments"]);
      EXPECT_EQ(str(e["name"]), "f");
    }
  }
  EXPECT_EQ(arguments, done_arguments);
  EXPECT_EQ(types.front(), "response.created");
  EXPECT_EQ(types.back(), "response.completed");
  EXPECT_EQ(types[types.size() - 2], "response.output_item.done");
}

// Two calls streamed: the first closes (its arguments' done, its item's done) before the second
// is added, one item open at a time, as OpenAI streams them.
TEST(responses_assembly, a_call_closes_before_the_next_is_added) {
  fake_inference inf;
  responses_assembly a;
  auto req = request(true);
  req.chat.spec.tools.push_back({"f", "", R"({"type":"object"})"});
  ASSERT_FALSE(a.begin(req, 1, inf));
  const std::string call = tool_call_text;
  std::vector<std::string> events;
  for (const auto& st : {a.feed(0, token(1, call + "\n")), a.feed(0, token(2, call)), a.feed(0, done(actors::finish::stop))})
    events.insert(events.end(), st.events.begin(), st.events.end());
  std::vector<std::string> order;
  for (const auto& ev : events) {
    auto [type, json] = typed(ev);
    doc e(json);
    if (type == "response.output_item.added" || type == "response.output_item.done" ||
        type == "response.function_call_arguments.done")
      order.push_back(type.substr(9) + " " + std::to_string(int64_t(e["output_index"])));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"output_item.added 0", "function_call_arguments.done 0", "output_item.done 0",
                                             "output_item.added 1", "function_call_arguments.done 1",
                                             "output_item.done 1"}));
}

TEST(responses_assembly, an_error_is_the_answer_or_an_error_event) {
  fake_inference inf;
  responses_assembly a;
  ASSERT_FALSE(a.begin(request(false), 1, inf));
  auto s = a.feed(0, actors::error_event{1, actors::errc::context_length, "the prompt is too long for the context", 0});
  ASSERT_TRUE(s.error);
  EXPECT_EQ(s.error->param, "input");
  EXPECT_TRUE(s.cancel);
  EXPECT_FALSE(a.answered());

  ASSERT_FALSE(a.begin(request(true), 1, inf));
  a.feed(0, token(1, "He"));
  auto e = a.feed(0, actors::error_event{1, actors::errc::internal, "boom", 0});
  EXPECT_FALSE(e.error);
  EXPECT_TRUE(e.end_stream);
  ASSERT_EQ(e.events.size(), 1u);
  auto [type, json] = typed(e.events[0]);
  EXPECT_EQ(type, "error");
  doc d(json);
  EXPECT_EQ(str(d["message"]), "boom");
  EXPECT_EQ(int64_t(d["sequence_number"]), 5);  // created, in_progress, item, part, delta, then this
}

TEST(responses_assembly, a_logit_bias_outside_the_vocabulary_is_refused) {
  fake_inference inf;
  responses_assembly a;
  auto req = request(false);
  req.chat.spec.sampling.logit_bias.push_back({150, 1.0f});
  auto e = a.begin(req, 1, inf);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logit_bias.150");
}

// The session opens a stream early to probe a client that half-closed: the head events go out
// then, once, and the numbering goes on from them.
TEST(responses_assembly, a_stream_opened_early_starts_with_its_head) {
  fake_inference inf;
  responses_assembly a;
  ASSERT_FALSE(a.begin(request(true), 1, inf));
  auto head = a.open_stream_now();
  EXPECT_TRUE(head.open_stream);
  ASSERT_EQ(head.events.size(), 2u);
  EXPECT_EQ(typed(head.events[0]).first, "response.created");
  EXPECT_EQ(typed(head.events[1]).first, "response.in_progress");
  EXPECT_TRUE(a.stream_open());
  EXPECT_TRUE(a.open_stream_now().events.empty());
  auto s = a.feed(0, token(1, "He"));
  EXPECT_FALSE(s.open_stream);
  ASSERT_FALSE(s.events.empty());
  doc d(typed(s.events[0]).second);
  EXPECT_EQ(int64_t(d["sequence_number"]), 2);
  // Not streamed: nothing to open.
  ASSERT_FALSE(a.begin(request(false), 1, inf));
  EXPECT_FALSE(a.open_stream_now().open_stream);
}

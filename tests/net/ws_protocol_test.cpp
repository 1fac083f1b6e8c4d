// net/ws_protocol without sockets: client frames parsed, server frames written.
#include <gtest/gtest.h>

#include <simdjson.h>

#include "net/ws_protocol.hpp"
#include "tests/net/valid_json.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::net::test::valid_json;

TEST(ws_protocol, parses_frames) {
  auto g = parse_client_frame(R"({"type":"generate","id":"a1","prompt":"hi","max_tokens":4,"priority":2})");
  ASSERT_TRUE(g.frame) << g.error.message;
  EXPECT_EQ(g.frame->type, frame_type::generate);
  EXPECT_EQ(g.frame->id, "a1");
  EXPECT_EQ(g.frame->spec.prompt, "hi");
  EXPECT_EQ(g.frame->spec.priority, 2);

  auto c = parse_client_frame(R"({"type":"cancel","id":7})");
  ASSERT_TRUE(c.frame);
  EXPECT_EQ(c.frame->id, "7");

  auto r = parse_client_frame(R"({"type":"resume","id":"a1","from_index":3,"resume_key":"k"})");
  ASSERT_TRUE(r.frame);
  EXPECT_EQ(r.frame->from_index, 3);
  EXPECT_EQ(r.frame->resume_key, "k");
}

// A resume needs the generate's resume_key; a generate's key is a secret of 16 to 256 characters.
TEST(ws_protocol, resume_keys_are_checked) {
  auto no_key = parse_client_frame(R"({"type":"resume","id":"a1","from_index":3})");
  ASSERT_FALSE(no_key.frame);
  EXPECT_EQ(no_key.error.param, "resume_key");
  EXPECT_NE(no_key.error.message.find("resume_key"), std::string::npos);
  auto g = parse_client_frame(R"({"type":"generate","id":"a1","prompt":"hi","resume_key":"0123456789abcdef"})");
  ASSERT_TRUE(g.frame) << g.error.message;
  EXPECT_EQ(g.frame->resume_key, "0123456789abcdef");
  auto none = parse_client_frame(R"({"type":"generate","id":"a1","prompt":"hi"})");
  ASSERT_TRUE(none.frame);
  EXPECT_TRUE(none.frame->resume_key.empty());
  for (const char* bad : {R"({"type":"generate","id":"a1","prompt":"hi","resume_key":"short"})",
                          R"({"type":"generate","id":"a1","prompt":"hi","resume_key":7})"}) {
    auto b = parse_client_frame(bad);
    EXPECT_FALSE(b.frame) << bad;
    EXPECT_EQ(b.error.param, "resume_key") << bad;
  }
}

TEST(ws_protocol, bad_frames_name_the_problem) {
  auto j = parse_client_frame("not json");
  EXPECT_FALSE(j.frame);
  EXPECT_EQ(j.error.code, "invalid_json");
  auto t = parse_client_frame(R"({"type":"dance","id":"x"})");
  EXPECT_FALSE(t.frame);
  EXPECT_EQ(t.error.code, "unknown_type");
  EXPECT_EQ(t.id, "x");
  auto w = parse_client_frame(R"({"type":"generate","id":"x","prompt":"p","temperature":"hot"})");
  EXPECT_FALSE(w.frame);
  EXPECT_EQ(w.error.param, "temperature");
  auto n = parse_client_frame(R"({"type":"generate","prompt":"p"})");
  EXPECT_FALSE(n.frame);
  EXPECT_EQ(n.error.param, "id");
  // The WebSocket protocol keeps the sampler's temperature range, [0, 100] (OpenAI's API: [0, 2]).
  auto warm = parse_client_frame(R"({"type":"generate","id":"x","prompt":"p","temperature":2.5})");
  EXPECT_TRUE(warm.frame) << warm.error.message;
  auto boiling = parse_client_frame(R"({"type":"generate","id":"x","prompt":"p","temperature":101})");
  EXPECT_EQ(boiling.error.param, "temperature");
}

// `auth` needs its `key` (a missing one is named, not reported as a wrong key); a `ping`'s
// optional `id` comes back in its `pong`, so that a client can match them.
// A generate frame refused while it is read is a refused request (the session counts it in
// /metrics); other frames refused, and generate frames read whole, are not.
TEST(ws_protocol, refused_generate_frames_are_told_apart) {
  auto bad_generate = parse_client_frame(R"({"type":"generate","id":"g","prompt":"hi","temperature":-1})");
  EXPECT_FALSE(bad_generate.frame);
  EXPECT_TRUE(bad_generate.refused_generate);
  EXPECT_EQ(bad_generate.id, "g");
  auto unknown_field = parse_client_frame(R"({"type":"generate","id":"g","prompt":"hi","bogus":1})");
  EXPECT_TRUE(unknown_field.refused_generate);
  EXPECT_EQ(unknown_field.error.param, "bogus");
  auto good = parse_client_frame(R"({"type":"generate","id":"g","prompt":"hi"})");
  ASSERT_TRUE(good.frame);
  EXPECT_FALSE(good.refused_generate);
  auto bad_cancel = parse_client_frame(R"({"type":"cancel"})");
  EXPECT_FALSE(bad_cancel.frame);
  EXPECT_FALSE(bad_cancel.refused_generate);
  EXPECT_FALSE(parse_client_frame("not json").refused_generate);
}

TEST(ws_protocol, auth_needs_a_key_and_pong_echoes_the_ping_id) {
  auto no_key = parse_client_frame(R"({"type":"auth"})");
  ASSERT_FALSE(no_key.frame);
  EXPECT_EQ(no_key.error.param, "key");
  EXPECT_EQ(no_key.error.code, "invalid_request");
  auto empty_key = parse_client_frame(R"({"type":"auth","key":""})");
  EXPECT_EQ(empty_key.error.param, "key");
  auto ok = parse_client_frame(R"({"type":"auth","key":"k"})");
  ASSERT_TRUE(ok.frame);
  EXPECT_EQ(ok.frame->key, "k");
  auto ping = parse_client_frame(R"({"type":"ping","id":"p1"})");
  ASSERT_TRUE(ping.frame);
  EXPECT_EQ(ping.frame->id, "p1");
  simdjson::dom::parser p;
  auto with_id = p.parse(pong_frame("p1"));
  EXPECT_EQ(std::string_view(with_id["type"]), "pong");
  EXPECT_EQ(std::string_view(with_id["id"]), "p1");
  EXPECT_EQ(pong_frame(""), R"({"type":"pong"})");
  EXPECT_TRUE(valid_json(pong_frame("a\"b")));
}

TEST(ws_protocol, server_frames_are_json) {
  simdjson::dom::parser p;
  auto t = p.parse(token_frame("a", 4, "x\n"));
  EXPECT_EQ(std::string_view(t["type"]), "token");
  EXPECT_EQ(int64_t(t["index"]), 4);
  actors::done_event d;
  d.finish_reason = "stop";
  d.usage = {5, 6, 0};
  d.timings.ttft_ms = 12.5;
  d.cached = true;
  auto df = p.parse(done_frame("a", d));
  EXPECT_EQ(std::string_view(df["finish_reason"]), "stop");
  EXPECT_EQ(bool(df["cached"]), true);
  EXPECT_DOUBLE_EQ(double(df["timings"]["ttft_ms"]), 12.5);
  EXPECT_TRUE(valid_json(error_frame("", "c", "m")));
}

// A generate frame's `speculative`: a method name or false; the done frame's usage reports
// what was proposed and accepted, only when something was.
TEST(ws_protocol, speculative_field_and_done_usage) {
  auto named = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","speculative":"ngram"})");
  ASSERT_TRUE(named.frame) << named.error.message;
  EXPECT_EQ(named.frame->spec.speculative, "ngram");
  auto off = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","speculative":false})");
  ASSERT_TRUE(off.frame) << off.error.message;
  EXPECT_EQ(off.frame->spec.speculative, "off");
  auto wrong = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","speculative":true})");
  ASSERT_FALSE(wrong.frame);
  EXPECT_EQ(wrong.error.param, "speculative");

  simdjson::dom::parser p;
  actors::done_event d;
  d.finish_reason = "length";
  d.usage = {5, 6, 0};
  auto plain = p.parse(done_frame("a", d));
  EXPECT_EQ(plain["usage"]["speculative"].error(), simdjson::NO_SUCH_FIELD);
  d.usage.speculative_proposed = 8;
  d.usage.speculative_accepted = 5;
  auto df = p.parse(done_frame("a", d));
  EXPECT_EQ(int64_t(df["usage"]["speculative"]["proposed"]), 8);
  EXPECT_EQ(int64_t(df["usage"]["speculative"]["accepted"]), 5);
  EXPECT_EQ(int64_t(df["usage"]["completion_tokens"]), 6);
}

// A generate frame's `cache` is three-way like the HTTP field: absent, true, false.
TEST(ws_protocol, the_cache_field_is_three_way) {
  using cache::cache_choice;
  auto absent = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi"})");
  ASSERT_TRUE(absent.frame) << absent.error.message;
  EXPECT_EQ(absent.frame->spec.cache, cache_choice::automatic);
  auto yes = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","cache":true})");
  ASSERT_TRUE(yes.frame) << yes.error.message;
  EXPECT_EQ(yes.frame->spec.cache, cache_choice::requested);
  auto no = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","cache":false})");
  ASSERT_TRUE(no.frame) << no.error.message;
  EXPECT_EQ(no.frame->spec.cache, cache_choice::refused);
  auto wrong = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","cache":1})");
  ASSERT_FALSE(wrong.frame);
  EXPECT_EQ(wrong.error.param, "cache");
}

// A generate frame takes the OpenAI body's constraint and tool fields, and refuses any field it
// does not read by name (as the HTTP endpoints do); the other frames too.
TEST(ws_protocol, generate_takes_constraints_and_tools_and_names_unknown_fields) {
  auto g = parse_client_frame(
      R"({"type":"generate","id":"a","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},
          "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required",
          "logit_bias":{"5":-100}})");
  ASSERT_TRUE(g.frame) << g.error.message;
  EXPECT_EQ(g.frame->spec.constraint.kind, "json_object");
  ASSERT_EQ(g.frame->spec.tools.size(), 1u);
  EXPECT_EQ(g.frame->spec.tool_choice, "required");
  ASSERT_EQ(g.frame->spec.sampling.logit_bias.size(), 1u);
  auto re = parse_client_frame(R"({"type":"generate","id":"a","prompt":"n=","structured_outputs":{"regex":"[0-9]+"}})");
  ASSERT_TRUE(re.frame) << re.error.message;
  EXPECT_EQ(re.frame->spec.constraint.kind, "regex");
  auto unknown = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","stream":true})");
  ASSERT_FALSE(unknown.frame);
  EXPECT_EQ(unknown.error.param, "stream");
  EXPECT_NE(unknown.error.message.find("unknown field 'stream'"), std::string::npos);
  EXPECT_EQ(unknown.id, "a");  // the error frame can still name the request
  EXPECT_EQ(parse_client_frame(R"({"type":"cancel","id":"a","prompt":"x"})").error.param, "prompt");
  EXPECT_EQ(parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","max_tokens":0})").error.param,
            "max_tokens");
  EXPECT_EQ(parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","id":"b"})").error.param, "id");
}

TEST(ws_protocol, logprobs_on_the_generate_frame_and_in_token_frames) {
  auto g = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","logprobs":true,"top_logprobs":2})");
  ASSERT_TRUE(g.frame) << g.error.message;
  EXPECT_TRUE(g.frame->spec.logprobs);
  EXPECT_EQ(g.frame->spec.sampling.n_logprobs, 2);
  EXPECT_EQ(g.frame->spec.cache, cache::cache_choice::refused) << "a cached answer has no logprobs";
  EXPECT_EQ(parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","top_logprobs":2})").error.param,
            "top_logprobs");
  EXPECT_EQ(parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","logprobs":true,"top_logprobs":21})")
                .error.param,
            "top_logprobs");
  const auto members = token_logprobs_json("Hi", -0.25f, {{" there", -1.5f}, {"\xE2\x80", -2.0f}}, true);
  const auto frame = token_frame("a", 3, "Hi", members);
  EXPECT_EQ(frame.rfind(R"({"type":"token","id":"a","index":3,"text":"Hi","token":"Hi","logprob":-0.25,)", 0), 0u)
      << frame;
  EXPECT_NE(frame.find(R"("top_logprobs":[{"token":" there","logprob":-1.5})"), std::string::npos) << frame;
  EXPECT_EQ(frame.back(), '}');
  EXPECT_EQ(token_frame("a", 3, "Hi"), R"({"type":"token","id":"a","index":3,"text":"Hi"})");
}

// A frame with a key twice is refused, but its id, when readable (a string or integer `id` that
// is not the duplicated key), is echoed: a client waiting on that id would otherwise wait forever.
TEST(ws_protocol, a_duplicate_key_still_echoes_a_readable_id) {
  auto dup = parse_client_frame(R"({"type":"generate","id":"u2","prompt":"a","max_tokens":1,"max_tokens":2})");
  ASSERT_FALSE(dup.frame);
  EXPECT_EQ(dup.error.code, "duplicate_key");
  EXPECT_EQ(dup.error.param, "max_tokens");
  EXPECT_EQ(dup.id, "u2");
  auto nested = parse_client_frame(
      R"({"type":"generate","id":7,"messages":[{"role":"user","role":"system","content":"a"}]})");
  ASSERT_FALSE(nested.frame);
  EXPECT_EQ(nested.error.code, "duplicate_key");
  EXPECT_EQ(nested.id, "7");
  // The duplicated key is the id itself: neither copy is the frame's id.
  auto twice = parse_client_frame(R"({"type":"generate","id":"a","id":"b","prompt":"a"})");
  EXPECT_EQ(twice.error.code, "duplicate_key");
  EXPECT_EQ(twice.id, "");
  // An id of another type is not guessed at.
  auto odd = parse_client_frame(R"({"type":"cancel","id":[1],"x":1,"x":2})");
  EXPECT_EQ(odd.error.code, "duplicate_key");
  EXPECT_EQ(odd.id, "");
  simdjson::dom::parser p;
  auto f = p.parse(error_frame(dup.id, dup.error));
  EXPECT_EQ(std::string_view(f["id"]), "u2");
  EXPECT_EQ(std::string_view(f["code"]), "duplicate_key");
  EXPECT_EQ(std::string_view(f["param"]), "max_tokens");
}

// A pipeline error for a generate names the field as the client spelt it (the codec's mapping,
// as over HTTP): admission says "max_tokens ... exceeds this server's cap" whichever of
// max_tokens / max_completion_tokens the frame carried.
TEST(ws_protocol, a_pipeline_error_names_the_field_the_frame_spelt) {
  const actors::error_event cap{1, "invalid_request", "max_tokens 99999 exceeds this server's cap of 4096", 0};
  simdjson::dom::parser p;
  auto mct = parse_client_frame(R"({"type":"generate","id":"a","prompt":"hi","max_completion_tokens":99999})");
  ASSERT_TRUE(mct.frame) << mct.error.message;
  EXPECT_EQ(mct.frame->max_tokens_field, "max_completion_tokens");
  auto f = p.parse(pipeline_error_frame("a", cap, mct.frame->input_field, mct.frame->max_tokens_field));
  EXPECT_EQ(std::string_view(f["id"]), "a");
  EXPECT_EQ(std::string_view(f["code"]), "invalid_request");
  EXPECT_EQ(std::string_view(f["message"]), "max_completion_tokens 99999 exceeds this server's cap of 4096");
  EXPECT_EQ(std::string_view(f["param"]), "max_completion_tokens");

  auto mt = parse_client_frame(R"({"type":"generate","id":"b","prompt":"hi","max_tokens":99999})");
  ASSERT_TRUE(mt.frame) << mt.error.message;
  EXPECT_EQ(mt.frame->max_tokens_field, "max_tokens");
  auto g = p.parse(pipeline_error_frame("b", cap, mt.frame->input_field, mt.frame->max_tokens_field));
  EXPECT_EQ(std::string_view(g["message"]), "max_tokens 99999 exceeds this server's cap of 4096");
  EXPECT_EQ(std::string_view(g["param"]), "max_tokens");

  // Other admission refusals that lead with a field name it; a prompt too long names the input
  // the frame gave; an error with no field has a null param.
  auto top_p = p.parse(pipeline_error_frame("b", {1, "invalid_request", "top_p must be in (0, 1]", 0}, mt.frame->input_field, mt.frame->max_tokens_field));
  EXPECT_EQ(std::string_view(top_p["param"]), "top_p");
  auto chat = parse_client_frame(R"({"type":"generate","id":"c","messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(chat.frame) << chat.error.message;
  auto ctx = p.parse(pipeline_error_frame("c", {1, "context_length", "the prompt is too long", 0}, chat.frame->input_field, chat.frame->max_tokens_field));
  EXPECT_EQ(std::string_view(ctx["param"]), "messages");
  EXPECT_EQ(std::string_view(ctx["code"]), "context_length_exceeded");  // OpenAI's code
  auto ctx2 = p.parse(pipeline_error_frame("b", {1, "context_length", "the prompt is too long", 0}, mt.frame->input_field, mt.frame->max_tokens_field));
  EXPECT_EQ(std::string_view(ctx2["param"]), "prompt");
  auto busy = p.parse(pipeline_error_frame("b", {1, "overloaded", "the queue is full", 500}, mt.frame->input_field, mt.frame->max_tokens_field));
  EXPECT_EQ(std::string_view(busy["code"]), "overloaded");
  EXPECT_TRUE(busy["param"].is_null());
  EXPECT_EQ(int64_t(busy["retry_after_ms"]), 500);  // when to try again, as HTTP's Retry-After
  const std::string plain = pipeline_error_frame("b", {1, "invalid_request", "top_p must be in (0, 1]", 0}, "prompt",
                                                 "max_tokens");
  EXPECT_EQ(plain.find("retry_after_ms"), std::string::npos) << plain;  // only when the refusal has one
}

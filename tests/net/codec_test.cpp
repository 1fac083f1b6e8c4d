// The network codecs without sockets: JSON writer escaping, OpenAI request parsing and
// response/SSE encoding, WebSocket frames, API-key checks and the resumption store.
#include <gtest/gtest.h>

#include <simdjson.h>

#include "net/api.hpp"
#include "net/auth.hpp"
#include "net/json_writer.hpp"
#include "net/metrics.hpp"
#include "net/resume_store.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {
bool valid_json(const std::string& s) {
  simdjson::dom::parser p;
  simdjson::dom::element e;
  return p.parse(s).get(e) == simdjson::SUCCESS;
}
}  // namespace

TEST(json_writer, escapes_and_places_commas) {
  json_writer w;
  w.begin_object().field("a", "q\"\\\n\x01").field("n", int64_t{3}).key("l").begin_array().value(true).null().end_array();
  w.end_object();
  EXPECT_EQ(w.str(), R"({"a":"q\"\\\n\u0001","n":3,"l":[true,null]})");
}

TEST(json_writer, invalid_utf8_becomes_replacement_character) {
  std::string out;
  append_json_string(out, std::string("ok \xC3\xA9 bad \xFF end \xE2\x82"));
  EXPECT_EQ(out, "\"ok \xC3\xA9 bad \xEF\xBF\xBD end \xEF\xBF\xBD\xEF\xBF\xBD\"");
  EXPECT_TRUE(valid_json(out));
}

TEST(openai, parses_chat_request) {
  auto p = parse_openai_request(
      R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],
          "max_tokens":7,"temperature":0.5,"stop":["x","y"],"stream":true,"stream_options":{"include_usage":true},"seed":3})",
      true);
  ASSERT_TRUE(p.request) << p.error.message;
  const auto& r = *p.request;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.spec.messages.size(), 2u);
  EXPECT_EQ(r.spec.messages[1].content, "hi");
  EXPECT_EQ(r.spec.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.spec.sampling.temperature, 0.5f);
  EXPECT_EQ(r.spec.stop.size(), 2u);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(openai, rejects_bad_json_and_wrong_types) {
  auto bad = parse_openai_request("{nope", true);
  ASSERT_FALSE(bad.request);
  EXPECT_EQ(bad.error.status, 400);
  EXPECT_EQ(bad.error.code, "invalid_json");

  auto wrong = parse_openai_request(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"ten"})", true);
  ASSERT_FALSE(wrong.request);
  EXPECT_EQ(wrong.error.param, "max_tokens");
  EXPECT_NE(wrong.error.message.find("must be an integer"), std::string::npos);

  auto missing = parse_openai_request(R"({"model":"m"})", false);
  ASSERT_FALSE(missing.request);
  EXPECT_EQ(missing.error.param, "prompt");

  auto role = parse_openai_request(R"({"messages":[{"role":"wizard","content":"x"}]})", true);
  ASSERT_FALSE(role.request);
  EXPECT_EQ(role.error.param, "messages[0].role");
}

// A one-message chat request with `field` ("name":value) added.
static parsed_openai chat_with(const char* field) {
  return parse_openai_request(std::string(R"({"messages":[{"role":"user","content":"x"}],)") + field + "}", true);
}

// Integers that do not fit their field are named as out of range (top_k 10^12 used to wrap to a
// negative number and read "must be >= 0"); numbers beyond 64 bits are named as such; huge
// doubles are refused without undefined behaviour; any 64-bit seed goes, a negative one wraps.
TEST(openai, out_of_range_integers_are_named) {
  auto big = chat_with(R"("top_k":1000000000000)");
  ASSERT_FALSE(big.request);
  EXPECT_EQ(big.error.param, "top_k");
  EXPECT_NE(big.error.message.find("out of range"), std::string::npos) << big.error.message;
  auto huge = chat_with(R"("priority":1e300)");
  ASSERT_FALSE(huge.request);
  EXPECT_EQ(huge.error.param, "priority");
  auto beyond = chat_with(R"("seed":99999999999999999999999)");
  ASSERT_FALSE(beyond.request);
  EXPECT_EQ(beyond.error.code, "invalid_json");
  EXPECT_NE(beyond.error.message.find("64 bits"), std::string::npos) << beyond.error.message;
  auto seed = chat_with(R"("seed":-1)");
  ASSERT_TRUE(seed.request) << seed.error.message;
  EXPECT_EQ(seed.request->spec.sampling.seed, ~uint64_t{0});
  auto ok = chat_with(R"("top_k":40)");
  ASSERT_TRUE(ok.request);
  EXPECT_EQ(ok.request->spec.sampling.top_k, 40);
  auto umax = chat_with(R"("seed":18446744073709551615)");
  ASSERT_TRUE(umax.request) << umax.error.message;
  EXPECT_EQ(umax.request->spec.sampling.seed, ~uint64_t{0});
  auto off = chat_with(R"("top_k":-1)");  // vLLM's "off"
  ASSERT_TRUE(off.request) << off.error.message;
  EXPECT_EQ(off.request->spec.sampling.top_k, 0);
  auto neg = chat_with(R"("top_k":-2)");
  ASSERT_FALSE(neg.request);
  EXPECT_EQ(neg.error.param, "top_k");
  auto top_p = chat_with(R"("top_p":7)");
  ASSERT_FALSE(top_p.request);
  EXPECT_EQ(top_p.error.param, "top_p");
}

// Logprobs are refused by name (not answered with null); false, 0 and null are fine.
TEST(openai, logprobs_asked_for_are_refused_by_name) {
  for (const char* v : {R"("logprobs":true)", R"("logprobs":3)", R"("top_logprobs":2)"}) {
    auto r = chat_with(v);
    ASSERT_FALSE(r.request) << v;
    EXPECT_NE(r.error.param.find("logprobs"), std::string::npos) << v;
    EXPECT_NE(r.error.message.find("not supported"), std::string::npos) << v;
  }
  for (const char* v : {R"("logprobs":false)", R"("logprobs":0)", R"("logprobs":null)", R"("top_logprobs":0)"})
    EXPECT_TRUE(chat_with(v).request) << v;
}

TEST(openai, error_json_shape_and_status_mapping) {
  auto e = from_pipeline_error({0, actors::errc::overloaded, "busy", 1500});
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(from_pipeline_error({0, actors::errc::unknown_model, "m", 0}).status, 404);
  EXPECT_EQ(from_pipeline_error({0, "loading", "m", 0}).status, 503);
  const auto j = error_json(e);
  EXPECT_TRUE(valid_json(j));
  simdjson::dom::parser p;
  auto doc = p.parse(j);
  EXPECT_EQ(std::string_view(doc["error"]["message"]), "busy");
  EXPECT_EQ(std::string_view(doc["error"]["code"]), "overloaded");
  EXPECT_TRUE(doc["error"]["type"].is_string());
}

TEST(openai, responses_and_sse_chunks) {
  completion_result r;
  r.id = "chatcmpl-1";
  r.created = 5;
  r.model = "m";
  r.text = "hello \"you\"";
  r.finish_reason = "stop";
  r.usage = {3, 2, 1};
  const auto j = chat_completion_json(r);
  ASSERT_TRUE(valid_json(j));
  simdjson::dom::parser p;
  auto doc = p.parse(j);
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["message"]["content"]), "hello \"you\"");
  EXPECT_EQ(int64_t(doc["usage"]["total_tokens"]), 5);
  EXPECT_TRUE(valid_json(text_completion_json(r)));

  chunk_spec c;
  c.text = "tok";
  const auto ev = sse_event(chat_chunk_json(r, c));
  ASSERT_EQ(ev.rfind("data: ", 0), 0u);
  ASSERT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_TRUE(valid_json(ev.substr(6, ev.size() - 8)));
  EXPECT_EQ(sse_done, "data: [DONE]\n\n");
  chunk_spec fin;
  fin.finish_reason = "length";
  auto f = p.parse(chat_chunk_json(r, fin));
  EXPECT_EQ(std::string_view(f["choices"].at(0)["finish_reason"]), "length");
}

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

TEST(auth, bearer_and_constant_time_compare) {
  EXPECT_EQ(bearer_key("Bearer abc"), "abc");
  EXPECT_EQ(bearer_key("bearer  abc "), "abc");
  EXPECT_EQ(bearer_key("Basic abc"), "");
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_EQ(find_key({}, ""), 0);
  EXPECT_EQ(find_key({"k1", "k2"}, "k2"), 1);
  EXPECT_EQ(find_key({"k1", "k2"}, "k3"), -1);
}

TEST(resume_store, replays_after_index_then_goes_live_without_gaps_or_duplicates) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "r1");
  ASSERT_TRUE(rec);
  EXPECT_FALSE(store.create("", "r1")) << "a running id cannot be reused";
  std::vector<std::string> first, second;
  int tag1 = 0, tag2 = 0;
  rec->attach([&](std::string f, std::function<void()>) { first.push_back(f); }, -1, &tag1);
  rec->add_token(0, "t0");
  rec->add_token(1, "t1");
  const auto t = stream_record::clock::now();
  rec->detach(&tag1, t, std::chrono::milliseconds(1000));
  rec->add_token(2, "t2");  // produced while nobody is attached
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { second.push_back(f); }, 0, &tag2));
  rec->add_token(3, "t3");
  rec->finish("done", t, std::chrono::milliseconds(1000));
  EXPECT_EQ(first, (std::vector<std::string>{"t0", "t1"}));
  EXPECT_EQ(second, (std::vector<std::string>{"t1", "t2", "t3", "done"}));
  EXPECT_EQ(store.sweep(t + std::chrono::milliseconds(500)), 0u);
  EXPECT_TRUE(store.create("", "r1") == nullptr ? false : true) << "an ended id may be reused";
}

// Only the generate's resume_key resumes a stream (none: it cannot be resumed); a connection that
// still holds a stream when another resumes it gets the `displaced` frame, and no frame after.
TEST(resume_store, resume_keys_and_the_displaced_connection) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "s1", "secret-secret-secret");
  EXPECT_TRUE(rec->resumable_with("secret-secret-secret"));
  EXPECT_FALSE(rec->resumable_with("secret-secret-secreT"));
  EXPECT_FALSE(rec->resumable_with(""));
  EXPECT_FALSE(store.create("", "s2")->resumable_with("")) << "no key: not resumable";
  std::vector<std::string> a, b;
  int tag_a = 0, tag_b = 0;
  rec->attach([&](std::string f, std::function<void()>) { a.push_back(f); }, -1, &tag_a, "moved");
  rec->add_token(0, "t0");
  EXPECT_TRUE(rec->attached_to(&tag_a));
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { b.push_back(f); }, 0, &tag_b, "moved"));
  EXPECT_FALSE(rec->attached_to(&tag_a));
  EXPECT_TRUE(rec->attached_to(&tag_b));
  EXPECT_FALSE(rec->attached_to(nullptr));
  rec->add_token(1, "t1");
  rec->finish("done", stream_record::clock::now(), std::chrono::milliseconds(1000));
  EXPECT_EQ(a, (std::vector<std::string>{"t0", "moved"}));
  EXPECT_EQ(b, (std::vector<std::string>{"t1", "done"}));
  // Resuming an ended stream displaces nobody: the holder had its final frame already.
  std::vector<std::string> c;
  int tag_c = 0;
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { c.push_back(f); }, 0, &tag_c, "moved"));
  EXPECT_EQ(b, (std::vector<std::string>{"t1", "done"}));
  EXPECT_EQ(c, (std::vector<std::string>{"t1", "done"}));
  // Ended but resumable within its window: only its key may take the id over.
  EXPECT_FALSE(store.create("", "s1", "someone-else-entirely"));
  EXPECT_FALSE(store.create("", "s1"));
  EXPECT_TRUE(store.create("", "s1", "secret-secret-secret"));
  // A keyless ended stream's id is free at once.
  auto keyless = store.create("", "s3");
  keyless->finish("done", stream_record::clock::now(), std::chrono::milliseconds(1000));
  EXPECT_TRUE(store.create("", "s3", "new-owner-new-owner"));
}

// A resume from an index beyond what was made gets only the tokens after it, live ones included.
TEST(resume_store, resume_from_beyond_the_recorded_tokens_skips_up_to_it) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "far", "secret-secret-secret");
  int acked = 0;
  rec->set_ack([&](int32_t n) { acked += n; });
  rec->add_token(0, "t0");
  std::vector<std::string> got;
  std::vector<std::function<void()>> written;  // (a sink posts; it never calls back inline)
  int tag = 0;
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()> w) {
    got.push_back(f);
    if (w) written.push_back(std::move(w));
  }, 2, &tag));
  rec->add_token(1, "t1");
  rec->add_token(2, "t2");
  rec->add_token(3, "t3");
  for (auto& w : written) w();
  EXPECT_EQ(got, (std::vector<std::string>{"t3"}));
  EXPECT_EQ(acked, 4) << "skipped tokens count as consumed";
}

TEST(resume_store, expiry_cancels_orphaned_streams) {
  resume_store store(std::chrono::milliseconds(10), 2);
  auto rec = store.create("k", "x");
  bool cancelled = false;
  rec->set_cancel([&] { cancelled = true; });
  int tag = 0;
  rec->attach([](std::string, std::function<void()>) {}, -1, &tag);
  rec->add_token(0, "a");
  rec->add_token(1, "b");
  rec->add_token(2, "c");  // keeps 2: index 0 is gone
  EXPECT_FALSE(rec->attach([](std::string, std::function<void()>) {}, -1, &tag)) << "token 0 was dropped from the window";
  const auto t = stream_record::clock::now();
  rec->detach(&tag, t, std::chrono::milliseconds(10));
  EXPECT_EQ(store.sweep(t + std::chrono::milliseconds(20)), 1u);
  EXPECT_TRUE(cancelled);
  EXPECT_FALSE(store.find("k", "x"));
}

TEST(metrics, renders_prometheus_text) {
  metrics m;
  m.count_request("chat_completions", "200");
  m.add_tokens(3);
  m.ttft.observe(0.02);
  const auto s = m.render("");
  EXPECT_NE(s.find("troupe_requests_total{endpoint=\"chat_completions\",status=\"200\"} 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_generated_tokens_total 3"), std::string::npos);
  EXPECT_NE(s.find("troupe_time_to_first_token_seconds_bucket{le=\"0.025\"} 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_time_to_first_token_seconds_count 1"), std::string::npos);
}

// Flow control: a token counts as consumed when its connection wrote it; while nobody is
// attached, at once; a connection that goes away releases what it had not written; acks that
// come before the pipeline's ack function is known are kept for it.
TEST(resume_store, tokens_are_acknowledged_when_written_or_released) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "f1");
  std::vector<std::function<void()>> pending;
  int tag = 0, tag2 = 0;
  rec->attach([&](std::string, std::function<void()> w) { if (w) pending.push_back(std::move(w)); }, -1, &tag);
  rec->add_token(0, "t0");  // before set_ack: remembered
  int acked = 0;
  rec->set_ack([&](int32_t n) { acked += n; });
  rec->add_token(1, "t1");
  rec->add_token(2, "t2");
  EXPECT_EQ(acked, 0) << "nothing is written yet";
  ASSERT_EQ(pending.size(), 3u);
  pending[0]();
  pending[1]();
  EXPECT_EQ(acked, 2);
  // The connection goes away with t2 unwritten: released on detach; its late callback is ignored.
  const auto t = stream_record::clock::now();
  rec->detach(&tag, t, std::chrono::milliseconds(1000));
  EXPECT_EQ(acked, 3);
  pending[2]();
  EXPECT_EQ(acked, 3);
  rec->add_token(3, "t3");  // nobody attached: acknowledged at once
  EXPECT_EQ(acked, 4);
  pending.clear();
  ASSERT_TRUE(rec->attach([&](std::string, std::function<void()> w) { if (w) pending.push_back(std::move(w)); }, 1, &tag2));
  EXPECT_TRUE(pending.empty()) << "replayed frames were acknowledged already";
  rec->add_token(4, "t4");
  ASSERT_EQ(pending.size(), 1u);
  pending[0]();
  EXPECT_EQ(acked, 5);
}

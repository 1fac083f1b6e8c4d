// net/openai_codec without sockets: OpenAI request parsing, response / SSE chunk encoding, and
// error bodies with their HTTP status.
#include <gtest/gtest.h>

#include <simdjson.h>

#include "net/openai_codec.hpp"
#include "tests/net/valid_json.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::net::test::valid_json;

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

// `cache` is three-way: absent (the cache's own rule), true (opt in), false (bypass the cache).
TEST(openai, the_cache_field_is_three_way) {
  using cache::cache_choice;
  auto absent = chat_with(R"("max_tokens":1)");
  ASSERT_TRUE(absent.request) << absent.error.message;
  EXPECT_EQ(absent.request->spec.cache, cache_choice::automatic);
  auto null = chat_with(R"("cache":null)");
  ASSERT_TRUE(null.request) << null.error.message;
  EXPECT_EQ(null.request->spec.cache, cache_choice::automatic);
  auto yes = chat_with(R"("cache":true)");
  ASSERT_TRUE(yes.request) << yes.error.message;
  EXPECT_EQ(yes.request->spec.cache, cache_choice::requested);
  auto no = parse_openai_request(R"({"prompt":"x","cache":false})", false);
  ASSERT_TRUE(no.request) << no.error.message;
  EXPECT_EQ(no.request->spec.cache, cache_choice::refused);
  auto wrong = chat_with(R"("cache":"no")");
  ASSERT_FALSE(wrong.request);
  EXPECT_EQ(wrong.error.param, "cache");
  EXPECT_NE(wrong.error.message.find("must be a boolean"), std::string::npos);
}

TEST(openai, parses_embedding_requests) {
  auto one = parse_embedding_request(R"({"input":"hello","model":"minilm"})");
  ASSERT_TRUE(one.query) << one.error.message;
  EXPECT_EQ(one.query->inputs, (std::vector<std::string>{"hello"}));
  EXPECT_EQ(one.query->model, "minilm");
  EXPECT_FALSE(one.query->base64);
  EXPECT_EQ(one.query->dimensions, 0);
  auto list = parse_embedding_request(
      R"({"input":["a","b"],"encoding_format":"base64","dimensions":384,"user":"u1","model":"m"})");
  ASSERT_TRUE(list.query) << list.error.message;
  EXPECT_EQ(list.query->inputs, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(list.query->base64);
  EXPECT_EQ(list.query->dimensions, 384);
}

// Each refusal names its field; token-id input is refused by name rather than misread.
TEST(openai, bad_embedding_requests_name_the_field) {
  auto param = [](const char* body) { return parse_embedding_request(body).error.param; };
  EXPECT_EQ(param(R"({"model":"m"})"), "input");
  EXPECT_EQ(param(R"({"input":""})"), "input");
  EXPECT_EQ(param(R"({"input":[]})"), "input");
  EXPECT_EQ(param(R"({"input":{"text":"x"}})"), "input");
  EXPECT_EQ(param(R"({"input":[1,2,3]})"), "input");
  EXPECT_EQ(param(R"({"input":[[1,2],[3]]})"), "input");
  EXPECT_EQ(param(R"({"input":["a",null]})"), "input[1]");
  EXPECT_EQ(param(R"({"input":["a",""]})"), "input[1]");
  EXPECT_EQ(param(R"({"input":"a","encoding_format":"int8"})"), "encoding_format");
  EXPECT_EQ(param(R"({"input":"a","dimensions":0})"), "dimensions");
  EXPECT_EQ(param(R"({"input":"a","dimensions":"384"})"), "dimensions");
  EXPECT_EQ(param(R"({"input":"a","model":7})"), "model");
  const auto ids = parse_embedding_request(R"({"input":[[1,2]]})");
  EXPECT_NE(ids.error.message.find("token ids"), std::string::npos);
  std::string many = R"({"input":[)";
  for (size_t i = 0; i <= max_embedding_inputs; ++i) many += i ? ",\"x\"" : "\"x\"";
  EXPECT_EQ(param((many + "]}").c_str()), "input");
}

TEST(openai, embeddings_json_in_floats_and_base64) {
  embedding_result r;
  r.vectors = {{1.0f, -0.5f}, {0.1f, 0.0f}};
  r.model = "minilm";
  r.prompt_tokens = 9;
  const auto f = embeddings_json(r, false);
  ASSERT_TRUE(valid_json(f)) << f;
  EXPECT_EQ(f, R"({"object":"list","data":[{"object":"embedding","index":0,"embedding":[1,-0.5]},)"
               R"({"object":"embedding","index":1,"embedding":[0.100000001,0]}],"model":"minilm",)"
               R"("usage":{"prompt_tokens":9,"total_tokens":9}})");
  // Little-endian float32 bytes: 1.0f = 00 00 80 3F, -0.5f = 00 00 00 BF.
  const auto b = embeddings_json(r, true);
  ASSERT_TRUE(valid_json(b)) << b;
  EXPECT_NE(b.find(R"("embedding":"AACAPwAAAL8=")"), std::string::npos) << b;
}

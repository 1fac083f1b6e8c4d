// net/openai_codec without sockets: OpenAI request parsing, response / SSE chunk encoding, and
// error bodies with their HTTP status.
#include <gtest/gtest.h>

#include <simdjson.h>

#include "net/openai_codec.hpp"
#include "tests/net/valid_json.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::net::test::valid_json;

static size_t dom_size(simdjson::dom::element e) { return simdjson::dom::array(e).size(); }

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
  // A UTF-8 byte order mark before the object is ignored (RFC 8259 8.1), not "invalid_json".
  EXPECT_TRUE(parse_openai_request("\xEF\xBB\xBF{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", true).request);
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
// metadata is ignored on purpose but held to OpenAI's limits, so what OpenAI refuses is refused.
TEST(openai, metadata_is_held_to_openai_limits) {
  EXPECT_TRUE(chat_with(R"("metadata":{"a":"b","team":"x"})").request);
  EXPECT_EQ(chat_with(R"("metadata":{"a":1})").error.param, "metadata.a");
  EXPECT_NE(chat_with(R"("metadata":{"a":{"b":[1]}})").error.message.find("must be a string"), std::string::npos);
  EXPECT_EQ(chat_with(R"("metadata":["a"])").error.param, "metadata");
  std::string many = R"("metadata":{)";
  for (int i = 0; i < 17; ++i) many += (i ? "," : "") + ("\"k" + std::to_string(i) + "\":\"v\"");
  auto seventeen = chat_with((many + "}").c_str());
  ASSERT_FALSE(seventeen.request);
  EXPECT_EQ(seventeen.error.param, "metadata");
  EXPECT_NE(seventeen.error.message.find("16"), std::string::npos) << seventeen.error.message;
  EXPECT_EQ(chat_with(("\"metadata\":{\"" + std::string(65, 'k') + "\":\"v\"}").c_str()).error.param,
            "metadata." + std::string(65, 'k'));
  // Characters, not bytes: 64 two-byte characters in a key and 512 three-byte ones in a value pass.
  std::string key, value;
  for (int i = 0; i < 64; ++i) key += "\xC3\xA9";          // é
  for (int i = 0; i < 512; ++i) value += "\xE6\x97\xA5";  // 日
  EXPECT_TRUE(chat_with(("\"metadata\":{\"" + key + "\":\"" + value + "\"}").c_str()).request);
  EXPECT_EQ(chat_with(("\"metadata\":{\"k\":\"" + std::string(513, 'v') + "\"}").c_str()).error.param, "metadata.k");
}

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
  EXPECT_EQ(beyond.error.param, "seed");
  // Numbers no double holds, and integers past int64 below zero, name their field too, wherever
  // they lie (simdjson's error carries no place: request_reader finds it).
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"("max_tokens":1e400)", "max_tokens"},
           {R"("temperature":-1e400)", "temperature"},
           {R"("seed":-9223372036854775809)", "seed"},
           {R"("seed":18446744073709551616)", "seed"},
           {R"("logit_bias":{"12":1,"13":1e999})", "logit_bias.13"},
           {R"("stop":["a\"],[1e400",2e400])", "stop[1]"}}) {
    auto bad = chat_with(body.c_str());
    ASSERT_FALSE(bad.request) << body;
    EXPECT_EQ(bad.error.code, "invalid_json") << body;
    EXPECT_EQ(bad.error.param, field) << body << ": " << bad.error.message;
  }
  EXPECT_EQ(parse_openai_request(R"({"messages":[{"role":"user","content":"1e400"}],"n":[1, 2e400]})", true).error.param,
            "n[1]");
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
  // temperature: OpenAI's [0, 2] (2.01 used to be taken, up to the sampler's 100).
  auto hot = chat_with(R"("temperature":2.01)");
  ASSERT_FALSE(hot.request);
  EXPECT_EQ(hot.error.param, "temperature");
  EXPECT_NE(hot.error.message.find("[0, 2]"), std::string::npos) << hot.error.message;
  EXPECT_TRUE(chat_with(R"("temperature":2)").request);
  auto cold = chat_with(R"("temperature":-0.5)");
  ASSERT_FALSE(cold.request);
  EXPECT_NE(cold.error.message.find("[0, 2]"), std::string::npos) << cold.error.message;  // not the sampler's 100
  EXPECT_EQ(chat_with(R"("max_completion_tokens":5)").request->max_tokens_field, "max_completion_tokens");
  EXPECT_EQ(chat_with(R"("max_tokens":5)").request->max_tokens_field, "max_tokens");
}

// Chat: `logprobs` a boolean, `top_logprobs` 0..20 with it; completions: `logprobs` 0..5.
TEST(openai, logprobs_are_parsed_per_endpoint) {
  auto on = chat_with(R"("logprobs":true,"top_logprobs":3)");
  ASSERT_TRUE(on.request) << on.error.message;
  EXPECT_TRUE(on.request->logprobs);
  EXPECT_TRUE(on.request->spec.logprobs);
  EXPECT_EQ(on.request->spec.sampling.n_logprobs, 3);
  auto off = chat_with(R"("logprobs":false)");
  ASSERT_TRUE(off.request);
  EXPECT_FALSE(off.request->spec.logprobs);
  EXPECT_EQ(chat_with(R"("top_logprobs":2)").error.param, "top_logprobs");  // needs logprobs: true
  EXPECT_EQ(chat_with(R"("logprobs":true,"top_logprobs":21)").error.param, "top_logprobs");
  EXPECT_EQ(chat_with(R"("logprobs":3)").error.param, "logprobs");  // a boolean on chat
  auto text = parse_openai_request(R"({"prompt":"x","logprobs":2})", false);
  ASSERT_TRUE(text.request) << text.error.message;
  EXPECT_TRUE(text.request->spec.logprobs);
  EXPECT_EQ(text.request->spec.sampling.n_logprobs, 2);
  auto zero = parse_openai_request(R"({"prompt":"x","logprobs":0})", false);
  ASSERT_TRUE(zero.request);
  EXPECT_TRUE(zero.request->spec.logprobs);  // the tokens' own, no alternatives
  EXPECT_EQ(zero.request->spec.sampling.n_logprobs, 0);
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","logprobs":6})", false).error.param, "logprobs");
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","top_logprobs":2})", false).error.param, "top_logprobs");
}

// Every field is honoured, refused by name, or ignored on purpose: an unknown one is a 400.
TEST(openai, unknown_and_unserved_fields_are_named) {
  auto unknown = chat_with(R"("foo":1)");
  ASSERT_FALSE(unknown.request);
  EXPECT_EQ(unknown.error.status, 400);
  EXPECT_EQ(unknown.error.param, "foo");
  EXPECT_NE(unknown.error.message.find("unknown field 'foo'"), std::string::npos) << unknown.error.message;
  for (const char* f : {"audio", "functions", "function_call", "prediction", "reasoning_effort", "web_search_options",
                        "verbosity"}) {
    auto r = chat_with((std::string("\"") + f + "\":{}").c_str());
    ASSERT_FALSE(r.request) << f;
    EXPECT_EQ(r.error.param, f);
    EXPECT_NE(r.error.message.find("not supported"), std::string::npos) << r.error.message;
  }
  EXPECT_EQ(chat_with(R"("prompt":"x")").error.param, "prompt");
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","messages":[]})", false).error.param, "messages");
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","suffix":"y"})", false).error.param, "suffix");
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","best_of":2})", false).error.param, "best_of");
  EXPECT_TRUE(parse_openai_request(R"({"prompt":"x","best_of":1,"user":"u"})", false).request);
  EXPECT_EQ(chat_with(R"("store":true)").error.param, "store");
  EXPECT_EQ(chat_with(R"("service_tier":"flex")").error.param, "service_tier");
  EXPECT_EQ(chat_with(R"("modalities":["text","audio"])").error.param, "modalities");
  EXPECT_EQ(chat_with(R"("parallel_tool_calls":"no")").error.param, "parallel_tool_calls");
  EXPECT_EQ(chat_with(R"("stream_options":{"include_usage":true})").error.param, "stream_options");  // without stream
  EXPECT_EQ(chat_with(R"("stream":true,"stream_options":{"x":1})").error.param, "stream_options.x");
  // Ignored on purpose, or asking for what the server does anyway.
  auto fine = chat_with(R"("user":"u","metadata":{"k":"v"},"store":false,"service_tier":"auto","modalities":["text"],)"
                        R"("parallel_tool_calls":true,"prompt_cache_key":"p","safety_identifier":"s")");
  EXPECT_TRUE(fine.request) << fine.error.message;
  EXPECT_EQ(parse_embedding_request(R"({"input":"a","bogus":1})").error.param, "bogus");
}

// Issue 24 item 9: lax validation made strict.
TEST(openai, lax_inputs_are_refused_by_name) {
  EXPECT_EQ(chat_with(R"("max_tokens":0)").error.param, "max_tokens");
  EXPECT_EQ(chat_with(R"("max_completion_tokens":0)").error.param, "max_completion_tokens");
  EXPECT_EQ(chat_with(R"("max_tokens":1e-400)").error.param, "max_tokens");
  EXPECT_EQ(chat_with(R"("max_tokens":2.0)").error.param, "max_tokens");
  EXPECT_EQ(chat_with(R"("n":1.5)").error.param, "n");
  EXPECT_EQ(chat_with(R"("max_tokens":3,"max_completion_tokens":3)").error.param, "max_completion_tokens");
  auto mct = chat_with(R"("max_completion_tokens":9)");
  ASSERT_TRUE(mct.request) << mct.error.message;
  EXPECT_EQ(mct.request->spec.max_tokens, 9);
  auto nocontent = parse_openai_request(R"({"messages":[{"role":"user"}]})", true);
  EXPECT_EQ(nocontent.error.param, "messages[0].content");
  auto dup = parse_openai_request(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_tokens":500})", true);
  ASSERT_FALSE(dup.request);
  EXPECT_EQ(dup.error.param, "max_tokens");
  EXPECT_NE(dup.error.message.find("duplicate key 'max_tokens'"), std::string::npos) << dup.error.message;
  auto nested = parse_openai_request(R"({"messages":[{"role":"user","content":"x","role":"system"}]})", true);
  EXPECT_EQ(nested.error.param, "messages[0].role");
  EXPECT_EQ(chat_with(R"("stop":"\u0000")").error.param, "stop");
  EXPECT_EQ(chat_with(R"("stop":["a",""])").error.param, "stop");
  EXPECT_EQ(chat_with(R"("stop":["a","b","c","d","e"])").error.param, "stop");
  EXPECT_TRUE(chat_with(R"("stop":["a","b","c","d"])").request);
  EXPECT_EQ(chat_with(R"("presence_penalty":2.5)").error.param, "presence_penalty");
  EXPECT_EQ(chat_with(R"("frequency_penalty":-2.5)").error.param, "frequency_penalty");
  EXPECT_EQ(chat_with(R"("n":0)").error.param, "n");
  EXPECT_EQ(chat_with(R"("n":17)").error.param, "n");
  auto n = chat_with(R"("n":3)");
  ASSERT_TRUE(n.request);
  EXPECT_EQ(n.request->n, 3);
}

TEST(openai, logit_bias_is_parsed_and_bounded) {
  auto ok = chat_with(R"("logit_bias":{"17":-100,"42":5.5})");
  ASSERT_TRUE(ok.request) << ok.error.message;
  const auto& b = ok.request->spec.sampling.logit_bias;
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].token, 17);
  EXPECT_FLOAT_EQ(b[0].bias, -100.0f);
  EXPECT_EQ(b[1].token, 42);
  EXPECT_FLOAT_EQ(b[1].bias, 5.5f);
  EXPECT_EQ(chat_with(R"("logit_bias":{"17":101})").error.param, "logit_bias.17");
  EXPECT_EQ(chat_with(R"("logit_bias":{"x":1})").error.param, "logit_bias.x");
  EXPECT_EQ(chat_with(R"("logit_bias":{"-3":1})").error.param, "logit_bias.-3");
  EXPECT_EQ(chat_with(R"("logit_bias":{"3":"1"})").error.param, "logit_bias.3");
  EXPECT_EQ(chat_with(R"("logit_bias":[1])").error.param, "logit_bias");
}

// The response cache neither keys logit_bias nor keeps logprob alternatives: such requests are
// generated afresh, and `cache: true` with them is refused by name.
TEST(openai, logit_bias_and_logprobs_bypass_the_response_cache) {
  using cache::cache_choice;
  EXPECT_EQ(chat_with(R"("logit_bias":{"1":1})").request->spec.cache, cache_choice::refused);
  EXPECT_EQ(chat_with(R"("logprobs":true)").request->spec.cache, cache_choice::refused);
  EXPECT_EQ(chat_with(R"("logprobs":false)").request->spec.cache, cache_choice::automatic);
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","logprobs":0})", false).request->spec.cache, cache_choice::refused);
  EXPECT_EQ(chat_with(R"("logprobs":true,"cache":true)").error.param, "cache");
  EXPECT_EQ(chat_with(R"("logit_bias":{"1":1},"cache":true)").error.param, "cache");
}

TEST(openai, constraints_are_parsed_one_at_a_time) {
  auto obj = chat_with(R"("response_format":{"type":"json_object"})");
  ASSERT_TRUE(obj.request) << obj.error.message;
  EXPECT_EQ(obj.request->spec.constraint.kind, "json_object");
  auto text = chat_with(R"("response_format":{"type":"text"})");
  ASSERT_TRUE(text.request);
  EXPECT_TRUE(text.request->spec.constraint.empty());
  auto schema = chat_with(
      R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object", "properties":{"a":{"type":"integer"}}}}})");
  ASSERT_TRUE(schema.request) << schema.error.message;
  EXPECT_EQ(schema.request->spec.constraint.kind, "json_schema");
  EXPECT_EQ(schema.request->spec.constraint.source, R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  auto g = chat_with(R"("grammar":"root ::= \"yes\"")");
  ASSERT_TRUE(g.request);
  EXPECT_EQ(g.request->spec.constraint.kind, "grammar");
  EXPECT_EQ(g.request->spec.constraint.source, "root ::= \"yes\"");
  auto re = chat_with(R"("structured_outputs":{"regex":"[0-9]+"})");
  ASSERT_TRUE(re.request);
  EXPECT_EQ(re.request->spec.constraint.kind, "regex");
  auto ch = chat_with(R"("guided_choice":["a", "b"])");
  ASSERT_TRUE(ch.request);
  EXPECT_EQ(ch.request->spec.constraint.kind, "choice");
  EXPECT_EQ(ch.request->spec.constraint.source, R"(["a","b"])");
  auto gj = parse_openai_request(R"({"prompt":"x","guided_json":{"type":"string"}})", false);
  ASSERT_TRUE(gj.request) << gj.error.message;
  EXPECT_EQ(gj.request->spec.constraint.kind, "json_schema");
  auto two = chat_with(R"("response_format":{"type":"json_object"},"grammar":"root ::= \"a\"")");
  ASSERT_FALSE(two.request);
  EXPECT_NE(two.error.message.find("'response_format' and 'grammar'"), std::string::npos) << two.error.message;
  EXPECT_EQ(chat_with(R"("response_format":{"type":"xml"})").error.param, "response_format.type");
  EXPECT_EQ(chat_with(R"("response_format":{"type":"json_schema"})").error.param, "response_format.json_schema");
  EXPECT_EQ(chat_with(R"("response_format":{"type":"json_schema","json_schema":{"schema":{}}})").error.param,
            "response_format.json_schema.name");  // required, as at OpenAI
  EXPECT_EQ(chat_with(R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"x":1}})").error.param,
            "response_format.json_schema.x");
  EXPECT_EQ(chat_with(R"("structured_outputs":{"regex":"a","choice":["b"]})").error.param, "structured_outputs.choice");
  EXPECT_EQ(chat_with(R"("structured_outputs":{"xml":"a"})").error.param, "structured_outputs.xml");
  EXPECT_EQ(chat_with(R"("guided_choice":[])").error.param, "guided_choice");
}

TEST(openai, tools_and_tool_messages_are_parsed) {
  auto r = parse_openai_request(
      R"({"messages":[{"role":"user","content":"weather?"},
          {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"12 C"}],
          "tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
          "tool_choice":{"type":"function","function":{"name":"get_weather"}}})",
      true);
  ASSERT_TRUE(r.request) << r.error.message;
  const auto& s = r.request->spec;
  ASSERT_EQ(s.tools.size(), 1u);
  EXPECT_EQ(s.tools[0].name, "get_weather");
  EXPECT_EQ(s.tools[0].parameters, R"({"type":"object","properties":{"city":{"type":"string"}}})");
  EXPECT_EQ(s.tool_choice, "function");
  EXPECT_EQ(s.tool_choice_name, "get_weather");
  ASSERT_EQ(s.messages.size(), 3u);
  ASSERT_EQ(s.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(s.messages[1].tool_calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(s.messages[2].role, "tool");
  EXPECT_EQ(s.messages[2].tool_call_id, "c1");

  auto req = [](const char* extra) {
    return parse_openai_request(std::string(R"({"messages":[{"role":"user","content":"x"}],)") + extra + "}", true);
  };
  const char* tool = R"("tools":[{"type":"function","function":{"name":"f"}}])";
  EXPECT_TRUE(req((std::string(tool) + R"(,"tool_choice":"required")").c_str()).request);
  EXPECT_EQ(req(R"("tool_choice":"required")").error.param, "tool_choice");
  EXPECT_EQ(req((std::string(tool) + R"(,"tool_choice":"sometimes")").c_str()).error.param, "tool_choice");
  EXPECT_EQ(req((std::string(tool) + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})").c_str()).error.param,
            "tool_choice.function.name");
  EXPECT_EQ(req(R"("tools":[{"type":"code_interpreter"}])").error.param, "tools[0].type");
  // Another tool type's own fields do not hide what is refused: its type.
  auto custom = req(R"("tools":[{"type":"custom","custom":{"name":"f"}}])").error;
  EXPECT_EQ(custom.param, "tools[0].type");
  EXPECT_EQ(custom.message, "'tools[0].type' \"custom\" is not served: \"function\" is the only tool type");
  EXPECT_EQ(req((std::string(tool) + R"(,"tool_choice":{"type":"allowed_tools","allowed_tools":{}})").c_str()).error.param,
            "tool_choice.type");
  EXPECT_EQ(req(R"("tools":[{"type":"function","function":{"name":"bad name"}}])").error.param, "tools[0].function.name");
  EXPECT_EQ(req(R"("tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])").error.param,
            "tools[0].function.parameters");
  // The arguments are a JSON object: a schema of another type is refused (OpenAI refuses it too).
  for (const char* schema : {R"({"type":"string"})", R"({"type":"array","items":{"type":"integer"}})",
                             R"({"type":["object","null"]})"}) {
    auto e = req((std::string(R"("tools":[{"type":"function","function":{"name":"f","parameters":)") + schema + "}}]").c_str());
    ASSERT_FALSE(e.request) << schema;
    EXPECT_EQ(e.error.param, "tools[0].function.parameters") << schema;
    EXPECT_NE(e.error.message.find("of type \"object\""), std::string::npos) << e.error.message;
  }
  EXPECT_TRUE(req(R"("tools":[{"type":"function","function":{"name":"f","parameters":{}}}])").request);
  auto strict = req(R"("tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}])");
  ASSERT_TRUE(strict.request) << strict.error.message;
  EXPECT_TRUE(strict.request->spec.tools[0].strict) << "strict is carried to admission (it constrains \"auto\" too)";
  auto args = parse_openai_request(
      R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}]})",
      true);
  EXPECT_EQ(args.error.param, "messages[0].tool_calls[0].function.arguments");
  auto no_id = parse_openai_request(R"({"messages":[{"role":"tool","content":"x"}]})", true);
  EXPECT_EQ(no_id.error.param, "messages[0].tool_call_id");
  // A participant's name, on any role (LangChain and LangGraph send them): carried to the template.
  auto name = parse_openai_request(
      R"({"messages":[{"role":"system","content":"s","name":"rules"},{"role":"user","content":"x","name":"bob"},)"
      R"({"role":"assistant","content":"y","name":"researcher-2"},{"role":"user","content":"z","name":null}]})",
      true);
  ASSERT_TRUE(name.request) << name.error.message;
  EXPECT_EQ(name.request->spec.messages[0].name, "rules");
  EXPECT_EQ(name.request->spec.messages[1].name, "bob");
  EXPECT_EQ(name.request->spec.messages[2].name, "researcher-2");
  EXPECT_EQ(name.request->spec.messages[3].name, "");
  for (const char* bad : {R"("")", R"("bob smith")", R"("a|b")", R"("x<y")", R"("a/b")", R"("a\nb")", R"("a\u0001")", "5"}) {
    auto e = parse_openai_request(std::string(R"({"messages":[{"role":"user","content":"x","name":)") + bad + "}]}", true);
    ASSERT_FALSE(e.request) << bad;
    EXPECT_EQ(e.error.param, "messages[0].name") << bad;
  }
  // parallel_tool_calls reaches admission (false: at most one call).
  auto one = req(R"("tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":false)");
  ASSERT_TRUE(one.request) << one.error.message;
  EXPECT_FALSE(one.request->spec.parallel_tool_calls);
  EXPECT_TRUE(req(R"("tools":[{"type":"function","function":{"name":"f"}}])").request->spec.parallel_tool_calls);
  auto dev = parse_openai_request(R"({"messages":[{"role":"developer","content":"be brief"}]})", true);
  ASSERT_TRUE(dev.request);
  EXPECT_EQ(dev.request->spec.messages[0].role, "system");
  EXPECT_EQ(parse_openai_request(R"({"prompt":"x","tools":[]})", false).error.param, "tools");
  // What OpenAI refuses too (an adversarial pass found them taken): no tools in `tools`, a user
  // message of no parts, a tool result that answers no call made before it.
  EXPECT_EQ(req(R"("tools":[])").error.param, "tools");
  EXPECT_TRUE(req(R"("stream":true,"stream_options":{"include_obfuscation":false})").request);
  EXPECT_EQ(req(R"("stream":true,"stream_options":{"include_obfuscation":true})").error.param,
            "stream_options.include_obfuscation");
  const auto twice = req(R"("logit_bias":{"5":1,"05":2})");  // one token, two spellings
  EXPECT_EQ(twice.error.param, "logit_bias.05");
  EXPECT_EQ(twice.error.code, "duplicate_key");
  EXPECT_EQ(parse_openai_request(R"({"messages":[{"role":"user","content":[]}]})", true).error.param,
            "messages[0].content");
  auto orphan = parse_openai_request(R"({"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c9","content":"y"}]})",
                                     true);
  EXPECT_EQ(orphan.error.param, "messages[1].tool_call_id");
  auto wrong = parse_openai_request(
      R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
          {"role":"tool","tool_call_id":"c2","content":"y"}]})",
      true);
  EXPECT_EQ(wrong.error.param, "messages[1].tool_call_id");
}

// What the openai client sends back as history (`message.model_dump()`) has the answer's null
// fields: they mean "none" and are accepted; a non-null one is refused by name.
TEST(openai, an_answer_sent_back_as_history_is_read) {
  auto dumped = parse_openai_request(
      R"({"messages":[{"role":"user","content":"hi"},
          {"content":"Hello","refusal":null,"role":"assistant","annotations":null,"audio":null,"function_call":null,"tool_calls":null},
          {"role":"user","content":"again"}]})",
      true);
  ASSERT_TRUE(dumped.request) << dumped.error.message;
  ASSERT_EQ(dumped.request->spec.messages.size(), 3u);
  EXPECT_EQ(dumped.request->spec.messages[1].content, "Hello");
  auto assistant = [](const char* extra) {
    return parse_openai_request(std::string(R"({"messages":[{"role":"assistant","content":"a",)") + extra + "}]}", true);
  };
  for (const char* f : {"refusal", "annotations", "audio", "function_call"}) {
    auto r = assistant((std::string("\"") + f + "\":" + (f == std::string("refusal") ? "\"no\"" : "{}")).c_str());
    ASSERT_FALSE(r.request) << f;
    EXPECT_EQ(r.error.param, std::string("messages[0].") + f);
  }
  // Only the assistant's answer has them.
  auto user = parse_openai_request(R"({"messages":[{"role":"user","content":"x","refusal":null}]})", true);
  EXPECT_EQ(user.error.param, "messages[0].refusal");
}

// A content part that is not text is refused naming the part and its type (image_url, audio and
// files are OpenAI's; this server reads text only).
TEST(openai, non_text_content_parts_are_named) {
  auto image = parse_openai_request(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]})",
      true);
  ASSERT_FALSE(image.request);
  EXPECT_EQ(image.error.param, "messages[0].content[1].type");
  EXPECT_EQ(image.error.code, "unsupported_field");
  EXPECT_NE(image.error.message.find("image_url"), std::string::npos) << image.error.message;
  for (const char* type : {"input_audio", "file", "refusal"}) {
    auto r = parse_openai_request(
        std::string(R"({"messages":[{"role":"user","content":[{"type":")") + type + R"(","x":{}}]}]})", true);
    ASSERT_FALSE(r.request) << type;
    EXPECT_EQ(r.error.param, "messages[0].content[0].type");
    EXPECT_NE(r.error.message.find(type), std::string::npos) << r.error.message;
  }
  EXPECT_EQ(parse_openai_request(R"({"messages":[{"role":"user","content":["hi"]}]})", true).error.param,
            "messages[0].content[0]");
  EXPECT_EQ(parse_openai_request(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", true).error.param,
            "messages[0].content[0].text");
  EXPECT_EQ(parse_openai_request(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{}}]}]})",
                                 true)
                .error.param,
            "messages[0].content[0].cache_control");
  auto two = parse_openai_request(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})", true);
  ASSERT_TRUE(two.request) << two.error.message;
  EXPECT_EQ(two.request->spec.messages[0].content, "a\nb") << "parts are joined by a line break, as llama.cpp and vLLM join them";
  // As OpenAI: a part says what it is (a part without `type` is not taken for text).
  auto untyped = parse_openai_request(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"text":"b"}]}]})", true);
  ASSERT_FALSE(untyped.request);
  EXPECT_EQ(untyped.error.param, "messages[0].content[1].type");
  EXPECT_NE(untyped.error.message.find("required"), std::string::npos) << untyped.error.message;
}

// /v1/completions without a length cap gets OpenAI's legacy default of 16 tokens; chat leaves it
// to admission (admission.default_max_tokens).
TEST(openai, the_legacy_endpoint_defaults_to_16_tokens) {
  auto legacy = parse_openai_request(R"({"prompt":"The capital of France is"})", false);
  ASSERT_TRUE(legacy.request) << legacy.error.message;
  EXPECT_EQ(legacy.request->spec.max_tokens, 16);
  auto asked = parse_openai_request(R"({"prompt":"x","max_tokens":40})", false);
  ASSERT_TRUE(asked.request);
  EXPECT_EQ(asked.request->spec.max_tokens, 40);
  auto chat = parse_openai_request(R"({"messages":[{"role":"user","content":"x"}]})", true);
  ASSERT_TRUE(chat.request);
  EXPECT_EQ(chat.request->spec.max_tokens, 0) << "admission's default";
}

// An empty prompt has nothing to continue: a 400 naming `prompt` (it used to reach admission and
// come back as "give exactly one of messages, prompt or prompt_tokens", naming no field).
TEST(openai, an_empty_prompt_is_named) {
  for (const char* p : {R"("")", R"([""])"}) {
    auto r = parse_openai_request(std::string(R"({"prompt":)") + p + "}", false);
    ASSERT_FALSE(r.request) << p;
    EXPECT_EQ(r.error.param, "prompt");
    EXPECT_NE(r.error.message.find("empty"), std::string::npos) << r.error.message;
  }
}

// A sampled request without a seed draws a fresh one, as OpenAI's and llama-server's do: asking
// twice gives two answers. A greedy one keeps seed 0 (it uses none, and the response cache's
// exact key includes it); so does `cache: true` (the client accepts a stored answer, which a
// fresh seed would never find). A given seed is kept.
TEST(openai, a_sampled_request_without_a_seed_draws_one) {
  auto a = chat_with(R"("temperature":1)");
  auto b = chat_with(R"("temperature":1)");
  ASSERT_TRUE(a.request && b.request);
  EXPECT_NE(a.request->spec.sampling.seed, b.request->spec.sampling.seed);
  auto null_seed = chat_with(R"("temperature":1,"seed":null)");
  auto null_seed2 = chat_with(R"("temperature":1,"seed":null)");
  ASSERT_TRUE(null_seed.request && null_seed2.request);
  EXPECT_NE(null_seed.request->spec.sampling.seed, null_seed2.request->spec.sampling.seed);
  auto greedy = chat_with(R"("max_tokens":1)");
  ASSERT_TRUE(greedy.request);
  EXPECT_EQ(greedy.request->spec.sampling.seed, 0u);
  auto opted_in = chat_with(R"("temperature":1,"cache":true)");
  ASSERT_TRUE(opted_in.request);
  EXPECT_EQ(opted_in.request->spec.sampling.seed, 0u);
  auto seeded = chat_with(R"("temperature":1,"seed":0)");
  ASSERT_TRUE(seeded.request);
  EXPECT_EQ(seeded.request->spec.sampling.seed, 0u);
  auto text = parse_openai_request(R"({"prompt":"x","temperature":0.7,"seed":42})", false);
  ASSERT_TRUE(text.request);
  EXPECT_EQ(text.request->spec.sampling.seed, 42u);
}

TEST(openai, echo_is_parsed_and_refused_with_logprobs) {
  auto e = parse_openai_request(R"({"prompt":"x","echo":true})", false);
  ASSERT_TRUE(e.request);
  EXPECT_TRUE(e.request->echo);
  auto both = parse_openai_request(R"({"prompt":"x","echo":true,"logprobs":1})", false);
  EXPECT_EQ(both.error.param, "echo");
}

// Chat logprobs as OpenAI shapes them: token (U+FFFD for a partial UTF-8 piece), logprob,
// bytes (exact), top_logprobs; completions: tokens, token_logprobs, top_logprobs, text_offset.
TEST(openai, logprobs_responses_are_shaped_as_openai) {
  completion_result r;
  r.id = "x";
  r.model = "m";
  r.logprobs = true;
  choice_result c0{"hé", "stop", {}};
  c0.logprobs.push_back({"h", -0.5f, {{"h", -0.5f}, {"H", -1.25f}}});
  c0.logprobs.push_back({"\xC3", -0.25f, {}});  // the first byte of é
  choice_result c1{"ho", "length", {}};
  r.choices = {c0, c1};
  const auto j = chat_completion_json(r);
  ASSERT_TRUE(valid_json(j)) << j;
  simdjson::dom::parser p;
  auto doc = p.parse(j);
  ASSERT_EQ(dom_size(doc["choices"]), 2u);
  EXPECT_EQ(int64_t(doc["choices"].at(1)["index"]), 1);
  EXPECT_EQ(std::string_view(doc["choices"].at(1)["finish_reason"]), "length");
  auto content = doc["choices"].at(0)["logprobs"]["content"];
  EXPECT_EQ(std::string_view(content.at(0)["token"]), "h");
  EXPECT_DOUBLE_EQ(double(content.at(0)["logprob"]), -0.5);
  EXPECT_EQ(int64_t(content.at(0)["bytes"].at(0)), 'h');
  EXPECT_EQ(std::string_view(content.at(0)["top_logprobs"].at(1)["token"]), "H");
  EXPECT_EQ(std::string_view(content.at(1)["token"]), "\xEF\xBF\xBD");
  EXPECT_EQ(int64_t(content.at(1)["bytes"].at(0)), 0xC3);

  r.text_offset_base = 3;
  const auto t = text_completion_json(r);
  ASSERT_TRUE(valid_json(t)) << t;
  auto td = p.parse(t);
  auto lp = td["choices"].at(0)["logprobs"];
  EXPECT_EQ(std::string_view(lp["tokens"].at(0)), "h");
  EXPECT_DOUBLE_EQ(double(lp["token_logprobs"].at(1)), -0.25);
  EXPECT_DOUBLE_EQ(double(lp["top_logprobs"].at(0)["H"]), -1.25);
  EXPECT_EQ(int64_t(lp["text_offset"].at(0)), 3);
  EXPECT_EQ(int64_t(lp["text_offset"].at(1)), 4);

  // A streamed chunk carries its choice's index and its tokens' logprobs.
  std::vector<token_logprob_entry> one{{"o", -0.1f, {}}};
  chunk_spec cs;
  cs.index = 1;
  cs.text = "o";
  cs.logprobs = &one;
  auto ch = p.parse(chat_chunk_json(r, cs));
  EXPECT_EQ(int64_t(ch["choices"].at(0)["index"]), 1);
  EXPECT_EQ(std::string_view(ch["choices"].at(0)["logprobs"]["content"].at(0)["token"]), "o");
  // Without logprobs asked, `logprobs` is null.
  completion_result plain = r;
  plain.logprobs = false;
  auto pd = p.parse(chat_completion_json(plain));
  EXPECT_TRUE(pd["choices"].at(0)["logprobs"].is_null());
}

TEST(openai, error_json_shape_and_status_mapping) {
  auto e = from_pipeline_error({0, actors::errc::overloaded, "busy", 1500});
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(from_pipeline_error({0, actors::errc::unknown_model, "m", 0}).status, 404);
  EXPECT_EQ(from_pipeline_error({0, actors::errc::unknown_model, "m", 0}).param, "model");
  const auto too_long = from_pipeline_error({0, actors::errc::context_length, "m", 0}, "messages");
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.param, "messages");
  EXPECT_EQ(too_long.code, "context_length_exceeded");  // OpenAI's code, which clients match on
  // The length cap named as the client spelt it.
  const auto spelt = from_pipeline_error({0, actors::errc::context_length, "12 prompt tokens + max_tokens (5) exceed", 0},
                                         "messages", "max_completion_tokens");
  EXPECT_NE(spelt.message.find("max_completion_tokens (5)"), std::string::npos) << spelt.message;
  const auto twice = from_pipeline_error(
      {0, actors::errc::context_length, "prompt plus max_tokens (5) exceeds 8; lower max_tokens", 0}, "messages",
      "max_completion_tokens");
  EXPECT_EQ(twice.message, "prompt plus max_completion_tokens (5) exceeds 8; lower max_completion_tokens");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::overloaded, "m", 0}, "messages").param, "");
  EXPECT_EQ(from_pipeline_error({0, "loading", "m", 0}).status, 503);
  const auto j = error_json(e);
  // Admission's refusals that start with a field name it as the param, max_tokens as the client
  // spelt it (the cap used to come back with param null and "max_tokens" for either spelling).
  const actors::error_event cap{0, actors::errc::invalid_request, "max_tokens 9000 exceeds this server's cap of 4096", 0};
  EXPECT_EQ(from_pipeline_error(cap, "messages").param, "max_tokens");
  const auto cap2 = from_pipeline_error(cap, "messages", "max_completion_tokens");
  EXPECT_EQ(cap2.param, "max_completion_tokens");
  EXPECT_EQ(cap2.message, "max_completion_tokens 9000 exceeds this server's cap of 4096");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::invalid_request, "top_p must be in (0, 1]", 0}).param, "top_p");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::invalid_request, "speculative: no method 'nope' (known: ngram)", 0}).param,
            "speculative");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::invalid_request, "'ignore_eos' cannot be combined with a structured output", 0})
                .param,
            "ignore_eos");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::invalid_request, "'tool_choice' forces a call, which cannot ...", 0}).param,
            "tool_choice");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::invalid_request, "give exactly one of messages or prompt", 0}).param, "");
  // A constraint refused when admission compiles it names the field that set it.
  const actors::error_event schema{0, actors::errc::invalid_request, "json_schema: unsupported keyword 'if' at /", 0};
  EXPECT_EQ(from_pipeline_error(schema, "messages", "max_tokens", "response_format").param, "response_format");
  EXPECT_EQ(from_pipeline_error(schema, "messages", "max_tokens", "guided_json").param, "guided_json");
  EXPECT_EQ(from_pipeline_error({0, actors::errc::invalid_request, "regex: unbalanced ) at offset 3 of the pattern", 0},
                                "prompt", "max_tokens", "structured_outputs")
                .param,
            "structured_outputs");
  EXPECT_EQ(chat_with(R"("response_format":{"type":"json_object"})").request->constraint_field, "response_format");
  EXPECT_EQ(chat_with(R"("guided_regex":"a+")").request->constraint_field, "guided_regex");
  EXPECT_EQ(chat_with(R"("seed":1)").request->constraint_field, "");
  EXPECT_TRUE(valid_json(j));
  simdjson::dom::parser p;
  auto doc = p.parse(j);
  EXPECT_EQ(std::string_view(doc["error"]["message"]), "busy");
  EXPECT_EQ(std::string_view(doc["error"]["code"]), "overloaded");
  EXPECT_TRUE(doc["error"]["type"].is_string());
}

// GET /v1/models and GET /v1/models/{id} (the openai client's models.list and models.retrieve).
TEST(openai, models_are_listed_and_one_is_described) {
  simdjson::dom::parser p;
  const auto one = model_json("smol", 7);
  ASSERT_TRUE(valid_json(one)) << one;
  auto m = p.parse(one);
  EXPECT_EQ(std::string_view(m["id"]), "smol");
  EXPECT_EQ(std::string_view(m["object"]), "model");
  EXPECT_EQ(int64_t(m["created"]), 7);
  EXPECT_EQ(std::string_view(m["owned_by"]), "troupe");
  const auto list = models_json({"smol", "all-MiniLM-L6-v2"}, 7);
  ASSERT_TRUE(valid_json(list)) << list;
  simdjson::dom::parser q;
  auto l = q.parse(list);
  EXPECT_EQ(std::string_view(l["object"]), "list");
  ASSERT_EQ(dom_size(l["data"]), 2u);
  EXPECT_EQ(std::string_view(l["data"].at(0)["id"]), "smol");
  EXPECT_EQ(std::string_view(l["data"].at(0)["object"]), "model");
  EXPECT_EQ(std::string_view(l["data"].at(1)["id"]), "all-MiniLM-L6-v2");
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

// `speculative`: a method name or false ("off"); absent leaves the server's method. Anything
// else is a 400 naming the field (an unknown name is refused where the proposers are).
TEST(openai, the_speculative_field_takes_a_method_name_or_false) {
  auto absent = chat_with(R"("max_tokens":1)");
  ASSERT_TRUE(absent.request) << absent.error.message;
  EXPECT_EQ(absent.request->spec.speculative, "");
  auto named = chat_with(R"("speculative":"suffix")");
  ASSERT_TRUE(named.request) << named.error.message;
  EXPECT_EQ(named.request->spec.speculative, "suffix");
  auto off = parse_openai_request(R"({"prompt":"x","speculative":false})", false);
  ASSERT_TRUE(off.request) << off.error.message;
  EXPECT_EQ(off.request->spec.speculative, "off");
  for (const char* bad : {R"("speculative":true)", R"("speculative":"")", R"("speculative":4)", R"("speculative":["ngram"])"}) {
    auto wrong = chat_with(bad);
    ASSERT_FALSE(wrong.request) << bad;
    EXPECT_EQ(wrong.error.param, "speculative") << bad;
    EXPECT_NE(wrong.error.message.find("method name"), std::string::npos) << wrong.error.message;
  }
}

// Usage carries `speculative: {proposed, accepted}` only where something was proposed.
TEST(openai, usage_reports_speculation_only_when_it_happened) {
  completion_result r;
  r.id = "chatcmpl-1";
  r.model = "m";
  r.usage = {3, 9, 0};
  simdjson::dom::parser p;
  auto plain = p.parse(chat_completion_json(r));
  EXPECT_EQ(plain["usage"]["speculative"].error(), simdjson::NO_SUCH_FIELD);
  r.usage.speculative_proposed = 12;
  r.usage.speculative_accepted = 7;
  const auto j = chat_completion_json(r);
  ASSERT_TRUE(valid_json(j));
  auto doc = p.parse(j);
  EXPECT_EQ(int64_t(doc["usage"]["speculative"]["proposed"]), 12);
  EXPECT_EQ(int64_t(doc["usage"]["speculative"]["accepted"]), 7);
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 9);
  auto t = p.parse(text_completion_json(r));
  EXPECT_EQ(int64_t(t["usage"]["speculative"]["accepted"]), 7);
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
  // A nested list of strings is not token ids: named as the wrong type it is.
  const auto nested = parse_embedding_request(R"({"input":[["a"]]})");
  EXPECT_EQ(nested.error.param, "input[0]");
  EXPECT_NE(nested.error.message.find("must be a string"), std::string::npos) << nested.error.message;
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

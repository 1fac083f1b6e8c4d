// net/responses_codec without sockets: a Responses API body read as the chat completion it
// amounts to, the fields it refuses by name, errors named in the Responses API's words, and
// previous_response_id's conversation.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "net/responses_codec.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {

parsed_responses parse(const std::string& body, const std::map<std::string, std::string>& stored = {}) {
  return parse_responses_request(body, [&](const std::string& id) -> std::optional<std::string> {
    auto it = stored.find(id);
    if (it == stored.end()) return std::nullopt;
    return it->second;
  });
}

// The param of the error `body` is refused with ("" when it is accepted).
std::string refused(const std::string& body) {
  auto p = parse(body);
  EXPECT_FALSE(p.request) << body;
  return p.request ? std::string() : p.error.param;
}

}  // namespace

TEST(responses_codec, a_string_input_with_instructions_is_a_chat) {
  auto p = parse(R"({"model":"m","input":"hi","instructions":"be brief","max_output_tokens":9,"temperature":0.5,
                     "top_p":0.9,"stream":true,"metadata":{"a":"b"},"user":"u","store":false})");
  ASSERT_TRUE(p.request) << p.error.message;
  const auto& r = *p.request;
  ASSERT_EQ(r.chat.spec.messages.size(), 2u);
  EXPECT_EQ(r.chat.spec.messages[0].role, "system");
  EXPECT_EQ(r.chat.spec.messages[0].content, "be brief");
  EXPECT_EQ(r.chat.spec.messages[1].role, "user");
  EXPECT_EQ(r.chat.spec.messages[1].content, "hi");
  EXPECT_EQ(r.chat.spec.max_tokens, 9);
  EXPECT_FLOAT_EQ(r.chat.spec.sampling.temperature, 0.5f);
  EXPECT_TRUE(r.chat.stream);
  EXPECT_EQ(r.chat.model, "m");
  EXPECT_EQ(r.chat.max_tokens_field, "max_output_tokens");
  // Echoed back as sent; the instructions are not part of the stored conversation.
  EXPECT_EQ(r.settings.instructions, "be brief");
  EXPECT_EQ(*r.settings.max_output_tokens, 9);
  EXPECT_EQ(r.settings.metadata_json, R"({"a":"b"})");
  EXPECT_EQ(r.settings.user, "u");
  EXPECT_FALSE(r.settings.store);
  EXPECT_EQ(r.conversation, R"({"role":"user","content":"hi"})");
}

TEST(responses_codec, input_items_become_messages_and_calls_fold) {
  auto p = parse(R"({"input":[
      {"role":"developer","content":"sys"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
      {"type":"message","id":"msg_1","status":"completed","role":"assistant",
       "content":[{"type":"output_text","text":"let me look","annotations":[],"logprobs":[]}]},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}","id":"fc_1","status":"completed"},
      {"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"one"},
      {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}],
      "tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":null,"description":null},
               {"type":"function","name":"g","parameters":{"type":"object"}}]})");
  ASSERT_TRUE(p.request) << p.error.message;
  const auto& m = p.request->chat.spec.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[1].content, "a\nb");
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].content, "let me look");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].tool_calls[1].name, "g");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].tool_call_id, "c1");
  EXPECT_EQ(m[4].content, "two");
  ASSERT_EQ(p.request->chat.spec.tools.size(), 2u);
  EXPECT_EQ(p.request->chat.spec.tools[0].name, "f");
}

TEST(responses_codec, tools_tool_choice_and_text_format_are_chats) {
  auto p = parse(R"({"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],
                     "tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false})");
  ASSERT_TRUE(p.request) << p.error.message;
  EXPECT_EQ(p.request->chat.spec.tool_choice, actors::tool_choice::function);
  EXPECT_EQ(p.request->chat.spec.tool_choice_name, "f");
  EXPECT_FALSE(p.request->chat.spec.parallel_tool_calls);
  EXPECT_EQ(p.request->settings.tool_choice_json, R"({"type":"function","name":"f"})");
  EXPECT_FALSE(p.request->settings.parallel_tool_calls);

  auto j = parse(R"({"input":"x","text":{"format":{"type":"json_schema","name":"c","strict":true,
                     "schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}})");
  ASSERT_TRUE(j.request) << j.error.message;
  EXPECT_EQ(j.request->chat.constraint_field, "text.format");
  EXPECT_NE(j.request->settings.text_format_json.find("json_schema"), std::string::npos);
  auto o = parse(R"({"input":"x","text":{"format":{"type":"json_object"}}})");
  ASSERT_TRUE(o.request) << o.error.message;
  auto t = parse(R"({"input":"x","text":{"format":{"type":"text"}}})");
  ASSERT_TRUE(t.request) << t.error.message;
  EXPECT_TRUE(t.request->chat.constraint_field.empty());
}

TEST(responses_codec, logprobs_are_asked_by_include) {
  auto p = parse(R"({"input":"x","include":["message.output_text.logprobs"],"top_logprobs":3})");
  ASSERT_TRUE(p.request) << p.error.message;
  EXPECT_TRUE(p.request->chat.logprobs);
  EXPECT_EQ(p.request->chat.spec.sampling.n_logprobs, 3);
  EXPECT_EQ(refused(R"({"input":"x","include":["file_search_call.results"]})"), "include[0]");
}

TEST(responses_codec, defaults_and_nulls_the_client_sends_are_accepted) {
  auto p = parse(R"({"input":"x","background":false,"truncation":"disabled","reasoning":{"effort":null,"summary":null},
                     "instructions":null,"previous_response_id":null,"max_output_tokens":null,"store":true,
                     "text":{"format":{"type":"text"},"verbosity":null},"tool_choice":"auto","tools":[]})");
  ASSERT_TRUE(p.request) << p.error.message;
  EXPECT_FALSE(p.request->settings.has_instructions);
  EXPECT_TRUE(p.request->settings.store);
}

TEST(responses_codec, unhonoured_fields_are_refused_by_name) {
  EXPECT_EQ(refused(R"({"input":"x","background":true})"), "background");
  EXPECT_EQ(refused(R"({"input":"x","truncation":"auto"})"), "truncation");
  EXPECT_EQ(refused(R"({"input":"x","reasoning":{"effort":"high"}})"), "reasoning");
  EXPECT_EQ(refused(R"({"input":"x","tools":[{"type":"web_search"}]})"), "tools[0].type");
  EXPECT_EQ(refused(R"({"input":"x","tool_choice":{"type":"file_search"}})"), "tool_choice.type");
  // A format of another type is named by its type, not by its own fields.
  EXPECT_EQ(refused(R"({"input":"x","text":{"format":{"type":"grammar","syntax":"lark","definition":"x"}}})"),
            "text.format.type");
  EXPECT_EQ(refused(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(refused(R"({"input":[{"type":"reasoning","summary":[]}]})"), "input[0].type");
  EXPECT_EQ(refused(R"({"input":"x","max_tool_calls":2})"), "max_tool_calls");
  EXPECT_EQ(refused(R"({"input":"x","conversation":"conv_1"})"), "conversation");
  EXPECT_EQ(refused(R"({"input":"x","bogus":1})"), "bogus");
  EXPECT_EQ(refused(R"({"model":"m"})"), "input");
  // The chat parser's errors in this API's words.
  auto e = parse(R"({"input":"x","max_output_tokens":"many"})");
  ASSERT_FALSE(e.request);
  EXPECT_EQ(e.error.param, "max_output_tokens");
  EXPECT_EQ(refused(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":7}}})").rfind("text.format", 0),
            0u);
  EXPECT_EQ(refused(R"({"input":[{"type":"function_call_output","call_id":"nope","output":"r"}]})"), "input");
  // The messages say it in this API's words too (the chat message's index is not the item's).
  auto orphan = parse(R"({"input":[{"type":"function_call_output","call_id":"nope","output":"r"}],"instructions":"x"})");
  ASSERT_FALSE(orphan.request);
  EXPECT_EQ(orphan.error.message.find("messages"), std::string::npos) << orphan.error.message;
  EXPECT_NE(orphan.error.message.find("'input.call_id' \"nope\" answers no call of an earlier function_call item"),
            std::string::npos) << orphan.error.message;
  auto twice = parse(R"({"input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]})");
  ASSERT_FALSE(twice.request);
  EXPECT_EQ(twice.error.message.find(".function."), std::string::npos) << twice.error.message;
  EXPECT_EQ(twice.error.param, "tools[1].name");
  EXPECT_EQ(refused(R"({"input":"x","top_logprobs":-1})"), "top_logprobs");
  EXPECT_EQ(refused(R"({"input":[{"type":"function_call","call_id":"c","name":"","arguments":"{}"}]})"), "input[0].name");
  EXPECT_EQ(refused(R"({"input":"x","text":{"format":{"type":"json_object","schema":{}}}})"), "text.format.schema");
}

TEST(responses_codec, previous_response_id_prepends_its_conversation) {
  const std::map<std::string, std::string> stored = {
      {"resp_1", R"({"role":"user","content":"I am Ada"},{"role":"assistant","content":"Hi Ada"})"}};
  auto p = parse(R"({"input":"who am I?","instructions":"be kind","previous_response_id":"resp_1"})", stored);
  ASSERT_TRUE(p.request) << p.error.message;
  const auto& m = p.request->chat.spec.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].content, "be kind");
  EXPECT_EQ(m[1].content, "I am Ada");
  EXPECT_EQ(m[2].content, "Hi Ada");
  EXPECT_EQ(m[3].content, "who am I?");
  EXPECT_EQ(p.request->settings.previous_response_id, "resp_1");
  EXPECT_EQ(p.request->conversation,
            R"({"role":"user","content":"I am Ada"},{"role":"assistant","content":"Hi Ada"},{"role":"user","content":"who am I?"})");
  auto gone = parse(R"({"input":"x","previous_response_id":"resp_2"})", stored);
  ASSERT_FALSE(gone.request);
  EXPECT_EQ(gone.error.status, 404);
  EXPECT_EQ(gone.error.param, "previous_response_id");
  EXPECT_NE(gone.error.message.find("resp_2"), std::string::npos);
}

TEST(responses_codec, chat_params_are_named_in_responses_words) {
  EXPECT_EQ(responses_param("messages[3].content"), "input");
  EXPECT_EQ(responses_param("max_completion_tokens"), "max_output_tokens");
  EXPECT_EQ(responses_param("response_format.json_schema.schema"), "text.format.schema");
  EXPECT_EQ(responses_param("tools[1].function.parameters"), "tools[1].parameters");
  EXPECT_EQ(responses_param("tool_choice.function.name"), "tool_choice.name");
  EXPECT_EQ(responses_param("temperature"), "temperature");
}

TEST(responses_codec, input_items_are_listed_newest_first_with_ids) {
  auto p = parse(R"({"input":[{"role":"user","content":"a"},
                              {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
                              {"type":"function_call_output","call_id":"c1","output":"r"}],
                     "tools":[{"type":"function","name":"f"}]})");
  ASSERT_TRUE(p.request) << p.error.message;
  const auto& items = p.request->input_items;
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], R"({"type":"message","role":"user","status":"completed","content":[{"type":"input_text","text":"a"}]})");
  EXPECT_EQ(items[2], R"({"type":"function_call_output","call_id":"c1","output":"r","status":"completed"})");
  auto all = input_items_json("resp_x-1", items, "");
  ASSERT_TRUE(all.json);
  EXPECT_EQ(all.json->rfind(R"({"object":"list","data":[{"id":"item_x-1_2","type":"function_call_output")", 0), 0u) << *all.json;
  EXPECT_NE(all.json->find(R"("first_id":"item_x-1_2","last_id":"item_x-1_0","has_more":false})"), std::string::npos);
  auto page = input_items_json("resp_x-1", items, "order=asc&limit=1&after=item_x-1_0");
  ASSERT_TRUE(page.json);
  EXPECT_NE(page.json->find(R"("first_id":"item_x-1_1","last_id":"item_x-1_1","has_more":true})"), std::string::npos);
  EXPECT_FALSE(input_items_json("resp_x-1", items, "limit=0").json);
  EXPECT_NE(input_items_json("resp_x-1", items, "limit=0").error.message.find("'limit=0' is not valid here: input_items "
                                                                             "takes order (asc or desc), limit (1 to "
                                                                             "100) and after"),
            std::string::npos);
  auto twice = input_items_json("resp_x-1", items, "limit=1&limit=2");
  EXPECT_FALSE(twice.json);
  EXPECT_EQ(twice.error.message, "query parameter 'limit' is given twice");
  // Percent-encoded as clients send it; an unknown `after` and `include[]` are refused by name.
  auto encoded = input_items_json("resp_x-1", items, "order=asc&limit=%31&after=item%5Fx-1_0");
  ASSERT_TRUE(encoded.json) << encoded.error.message;
  EXPECT_EQ(*encoded.json, *page.json);
  EXPECT_EQ(input_items_json("resp_x-1", items, "after=item_bogus").error.param, "after");
  EXPECT_EQ(input_items_json("resp_x-1", items, "include%5B%5D=message.input_image.image_url").error.param, "include[]");
  auto s = parse(R"({"input":"hi"})");
  ASSERT_TRUE(s.request);
  ASSERT_EQ(s.request->input_items.size(), 1u);
  EXPECT_EQ(s.request->input_items[0],
            R"({"type":"message","role":"user","status":"completed","content":[{"type":"input_text","text":"hi"}]})");
}

// A function_call item is answered by a function_call_output item before the next message and
// before the input ends (OpenAI: "No tool output found for function call ..."); the calls of one
// turn may be answered in any order.
TEST(responses_codec, every_function_call_item_is_answered) {
  const std::string call1 = R"({"type":"function_call","call_id":"c1","name":"f","arguments":"{}"})";
  const std::string call2 = R"({"type":"function_call","call_id":"c2","name":"f","arguments":"{}"})";
  auto out = [](const char* id) {
    return std::string(R"({"type":"function_call_output","call_id":")") + id + R"(","output":"r"})";
  };
  const std::string user = R"({"role":"user","content":"go on"})";
  EXPECT_TRUE(parse(R"({"input":[)" + call1 + "," + call2 + "," + out("c2") + "," + out("c1") + "," + user + "]}").request);
  auto before_message = parse(R"({"input":[)" + call1 + "," + call2 + "," + out("c1") + "," + user + "]}");
  ASSERT_FALSE(before_message.request);
  EXPECT_EQ(before_message.error.param, "input");
  EXPECT_NE(before_message.error.message.find("No tool output found for function call c2 (input[1])"), std::string::npos)
      << before_message.error.message;
  EXPECT_NE(before_message.error.message.find("before the next message (input[3])"), std::string::npos)
      << before_message.error.message;
  auto at_end = parse(R"({"input":[)" + user + "," + call1 + "]}");
  ASSERT_FALSE(at_end.request);
  EXPECT_NE(at_end.error.message.find("c1 (input[1])"), std::string::npos) << at_end.error.message;
  EXPECT_NE(at_end.error.message.find("before the input ends"), std::string::npos) << at_end.error.message;
  // A call id is one call, answered once.
  auto two_calls = parse(R"({"input":[)" + call1 + "," + call1 + "," + out("c1") + "]}");
  ASSERT_FALSE(two_calls.request);
  EXPECT_EQ(two_calls.error.param, "input[1].call_id");
  auto two_answers = parse(R"({"input":[)" + call1 + "," + out("c1") + "," + out("c1") + "]}");
  ASSERT_FALSE(two_answers.request);
  EXPECT_EQ(two_answers.error.param, "input[2].call_id");
  EXPECT_NE(two_answers.error.message.find("answered by an earlier function_call_output"), std::string::npos)
      << two_answers.error.message;
  // An earlier answer's call item as the client library dumps it (async, caller, namespace null).
  EXPECT_TRUE(parse(R"({"input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"{}","async":null,)"
                    R"("caller":null,"namespace":null,"status":"completed","id":"fc_1"},)" + out("c1") + "]}")
                  .request);
  // A message with no content parts says nothing: refused, as chat refuses it.
  auto empty = parse(R"({"input":[{"role":"user","content":[]}]})");
  ASSERT_FALSE(empty.request);
  EXPECT_EQ(empty.error.param, "input[0].content");
}

// The response continued from ended in calls: the input opens with their outputs, or the 400 says
// which calls of which response, in the Responses API's terms.
TEST(responses_codec, calls_of_the_previous_response_are_answered_first) {
  const std::map<std::string, std::string> stored = {
      {"resp_a", R"({"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[)"
                 R"({"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},)"
                 R"({"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]})"}};
  auto plain = parse(R"({"previous_response_id":"resp_a","input":"and tomorrow?"})", stored);
  ASSERT_FALSE(plain.request);
  EXPECT_EQ(plain.error.param, "input");
  EXPECT_NE(plain.error.message.find("No tool output found for function call c1, c2 of response resp_a"),
            std::string::npos)
      << plain.error.message;
  auto one = parse(R"({"previous_response_id":"resp_a","input":[{"type":"function_call_output","call_id":"c2",)"
                   R"("output":"sun"}]})",
                   stored);
  ASSERT_FALSE(one.request);
  EXPECT_NE(one.error.message.find("function call c1 of"), std::string::npos) << one.error.message;
  EXPECT_TRUE(parse(R"({"previous_response_id":"resp_a","input":[{"type":"function_call_output","call_id":"c2",)"
                    R"("output":"sun"},{"type":"function_call_output","call_id":"c1","output":"rain"}]})",
                    stored)
                  .request);
}

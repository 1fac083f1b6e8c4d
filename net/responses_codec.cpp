#include "net/responses_codec.hpp"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <regex>
#include <utility>
#include <vector>

#include "net/detail/prompt_cache_fields.hpp"
#include "net/detail/request_reader.hpp"
#include "net/http_routes.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {

namespace dom = simdjson::dom;
using detail::reader;

namespace {

// Sampling and constraint fields read as the chat endpoint reads them (Troupe's extensions
// included), passed on unchanged. The Responses API's own names for the others are translated.
constexpr std::string_view passed_fields[] = {
    "model", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "seed", "priority", "ignore_eos", "cache", "deadline_ms", "stop", "logit_bias",
    "grammar", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "speculative", "stream", "stream_options", "parallel_tool_calls", "user", "metadata", "service_tier",
    "prompt_cache_key", "safety_identifier"};

// The Responses API's own fields: translated, echoed, or refused by name when they ask for what
// is not served.
constexpr std::string_view own_fields[] = {
    "input", "instructions", "max_output_tokens", "tools", "tool_choice", "text", "top_logprobs", "include",
    "store", "previous_response_id", "background", "truncation", "reasoning", "max_tool_calls", "prompt",
    "conversation", "prompt_cache_retention", "prompt_cache_options", "moderation", "access_programs",
    "background_options", "context_management", "image"};

std::string text_of(const dom::element& e) { return std::string(std::string_view(e)); }

// The input's chat messages, written as they are read: an assistant message and the function
// calls right after it fold into one message (the chat form of a turn that calls tools).
class message_list {
 public:
  void add(std::string json) {
    flush();
    out_.push_back(std::move(json));
  }
  void assistant(std::string content) {
    flush();
    content_ = std::move(content);
    open_ = true;
    has_content_ = true;
  }
  void call(const std::string& call_id, const std::string& name, const std::string& arguments) {
    if (!open_) {
      open_ = true;
      has_content_ = false;
    }
    json_writer w;
    w.begin_object().field("id", call_id).field("type", "function");
    w.key("function").begin_object().field("name", name).field("arguments", arguments).end_object();
    w.end_object();
    calls_.push_back(w.take());
  }
  std::string joined() {
    flush();
    std::string s;
    for (const auto& m : out_) {
      if (!s.empty()) s += ',';
      s += m;
    }
    return s;
  }

 private:
  void flush() {
    if (!open_) return;
    json_writer w;
    w.begin_object().field("role", "assistant").key("content");
    if (has_content_) w.value(content_);
    else w.null();
    if (!calls_.empty()) {
      w.key("tool_calls").begin_array();
      for (const auto& c : calls_) w.raw(c);
      w.end_array();
    }
    w.end_object();
    out_.push_back(w.take());
    open_ = false;
    content_.clear();
    calls_.clear();
  }
  std::vector<std::string> out_;
  bool open_ = false;
  bool has_content_ = false;
  std::string content_;
  std::vector<std::string> calls_;
};

// A message's or an output's content: a string, or text parts (`input_text`; `output_text` on
// an assistant message sent back). Other parts (images, files, audio) need what a text model
// lacks: refused by name, so that the client knows which to drop.
void read_content(reader& r, std::string_view k, const std::string& at, bool assistant, std::string& out) {
  auto c = r.get(k);
  if (!c) {
    if (!r.err) r.err = bad_request("'" + at + std::string(k) + "' is required", at + std::string(k));
    return;
  }
  if (c->is_string()) {
    out = text_of(*c);
    return;
  }
  if (!c->is_array()) return r.wrong(k, "a string or an array of input_text parts", *c);
  size_t j = 0;
  for (dom::element part : dom::array(*c)) {
    const std::string here = at + std::string(k) + "[" + std::to_string(j++) + "]";
    if (!part.is_object()) {
      r.err = bad_request("'" + here + "' must be a {\"type\":\"input_text\",\"text\":...} part", here);
      return;
    }
    reader pr{dom::object(part), std::nullopt, here + "."};
    std::string type;
    pr.str("type", type);
    const bool text = type == "input_text" || (assistant && type == "output_text");
    if (!pr.err && !text) {
      pr.err = bad_request("'" + here + ".type' \"" + type +
                               "\" is not supported by this server: it reads text parts only "
                               "({\"type\":\"input_text\",\"text\":...})",
                           here + ".type", "unsupported_field");
    }
    // An output_text part sent back carries its annotations and logprobs: not read.
    detail::known_fields(pr, {"type", "text", "annotations", "logprobs", "prompt_cache_breakpoint"});
    detail::refuse_cache_breakpoint(pr);
    if (!pr.err && !pr.get("text")) pr.err = bad_request("'" + here + ".text' is required", here + ".text");
    std::string piece;
    pr.str("text", piece);
    if (pr.err) {
      r.err = pr.err;
      return;
    }
    if (j > 1) out += '\n';  // parts joined by a line break, as chat messages' parts are
    out += piece;
  }
  if (j == 0 && !assistant)
    r.err = bad_request("'" + at + std::string(k) + "' must not be an empty array", at + std::string(k));
}

// One input item (`at`: where it is, for errors): a message, a function call an earlier answer
// made, or a call's output. Returns it as input_items lists it (without its id).
std::string read_item(reader& ir, const std::string& at, message_list& msgs) {
  std::string type = "message";  // a message may leave its type out
  ir.str("type", type);
  if (ir.err) return {};
  json_writer item;
  item.begin_object().field("type", type);
  if (type == "message") {
    detail::known_fields(ir, {"type", "role", "content", "id", "status", "phase"});
    std::string role;
    ir.str("role", role);
    if (!ir.err && role != "user" && role != "system" && role != "developer" && role != "assistant")
      ir.err = bad_request("'" + at + ".role' must be \"user\", \"system\", \"developer\" or \"assistant\"",
                           at + ".role");
    std::string content;
    if (!ir.err) read_content(ir, "content", at + ".", role == "assistant", content);
    if (!ir.err) {
      item.field("role", role).field("status", "completed").key("content").begin_array().begin_object();
      item.field("type", role == "assistant" ? "output_text" : "input_text").field("text", content);
      if (role == "assistant") item.key("annotations").begin_array().end_array();
      item.end_object().end_array();
      if (role == "assistant") {
        msgs.assistant(std::move(content));
      } else {
        json_writer w;
        w.begin_object().field("role", role).field("content", content).end_object();
        msgs.add(w.take());
      }
    }
  } else if (type == "function_call") {
    // An earlier answer's item sent back as the client library dumps it: its other fields
    // (async, caller, namespace) describe that answer and are not read.
    detail::known_fields(ir, {"type", "call_id", "name", "arguments", "id", "status", "namespace", "async", "caller"});
    std::string call_id, name, arguments;
    ir.str("call_id", call_id);
    ir.str("name", name);
    ir.str("arguments", arguments);
    for (const char* k : {"call_id", "name", "arguments"})
      if (!ir.err && !ir.get(k)) ir.err = bad_request("'" + at + "." + k + "' is required", at + "." + k);
    for (const auto& [k, v] : {std::pair<const char*, const std::string*>{"call_id", &call_id}, {"name", &name}})
      if (!ir.err && v->empty()) ir.err = bad_request("'" + at + "." + k + "' must not be empty", at + "." + k);
    if (!ir.err) msgs.call(call_id, name, arguments);
    item.field("call_id", call_id).field("name", name).field("arguments", arguments).field("status", "completed");
  } else if (type == "function_call_output") {
    detail::known_fields(ir, {"type", "call_id", "output", "id", "status"});
    std::string call_id, output;
    ir.str("call_id", call_id);
    if (!ir.err && !ir.get("call_id")) ir.err = bad_request("'" + at + ".call_id' is required", at + ".call_id");
    if (!ir.err) read_content(ir, "output", at + ".", false, output);
    if (!ir.err) {
      json_writer w;
      w.begin_object().field("role", "tool").field("tool_call_id", call_id).field("content", output).end_object();
      msgs.add(w.take());
    }
    item.field("call_id", call_id).field("output", output).field("status", "completed");
  } else {
    ir.err = bad_request("'" + at + ".type' \"" + type +
                             "\" is not supported by this server: input items are messages, function_call "
                             "and function_call_output",
                         at + ".type", "unsupported_field");
  }
  return item.end_object().take();
}

// `input`: a string (one user message) or a list of items: messages, function calls (an
// earlier answer's, sent back) and their outputs.
void read_input(reader& r, message_list& msgs, std::vector<std::string>& items) {
  auto in = r.get("input");
  if (!in) {
    if (!r.err) r.err = bad_request("'input' is required", "input");
    return;
  }
  if (in->is_string()) {
    json_writer w;
    w.begin_object().field("role", "user").field("content", std::string_view(*in)).end_object();
    json_writer item;
    item.begin_object().field("type", "message").field("role", "user").field("status", "completed");
    item.key("content").begin_array().begin_object().field("type", "input_text").field("text", std::string_view(*in));
    items.push_back(item.end_object().end_array().end_object().take());
    return msgs.add(w.take());
  }
  if (!in->is_array()) return r.wrong("input", "a string or an array of input items", *in);
  if (dom::array(*in).size() == 0) {
    r.err = bad_request("'input' must not be an empty array", "input");
    return;
  }
  size_t i = 0;
  // The input's function calls not yet answered by a function_call_output item: the turn that
  // follows them (a message) or the input's end must not come first (OpenAI: "No tool output
  // found for function call ..."). Calls of the response named by previous_response_id are
  // checked with the whole conversation, in the chat form (admission's tool prompt).
  std::vector<std::pair<std::string, std::string>> open;  // call_id, the item it came in
  std::vector<std::string> calls, answered;               // every function_call's call_id, every output's
  auto unanswered = [&](const std::string& before) {
    std::string ids;
    for (const auto& [id, where] : open) ids += (ids.empty() ? "" : ", ") + id + " (" + where + ")";
    r.err = bad_request("No tool output found for function call " + ids + ": each function_call item needs a " +
                            "function_call_output item with its call_id " + before,
                        "input");
  };
  for (dom::element item : dom::array(*in)) {
    const std::string at = "input[" + std::to_string(i++) + "]";
    if (!item.is_object()) {
      r.err = bad_request("'" + at + "' must be an object", at);
      return;
    }
    reader ir{dom::object(item), std::nullopt, at + "."};
    items.push_back(read_item(ir, at, msgs));
    if (ir.err) {
      r.err = ir.err;
      return;
    }
    std::string_view type, call_id;
    if (item["type"].get(type) != simdjson::SUCCESS) type = "message";
    if (item["call_id"].get(call_id) != simdjson::SUCCESS) call_id = {};
    // A call id is one call, answered once (the answer may be to a call of previous_response_id's).
    auto& ids = type == "function_call" ? calls : answered;
    if (type == "function_call" || type == "function_call_output") {
      if (std::find(ids.begin(), ids.end(), call_id) != ids.end()) {
        r.err = bad_request("'" + at + ".call_id' \"" + std::string(call_id) + "\" " +
                                (type == "function_call" ? "is the call id of an earlier function_call item: each call needs its own"
                                                         : "is answered by an earlier function_call_output item already"),
                            at + ".call_id");
        return;
      }
      ids.emplace_back(call_id);
    }
    if (type == "function_call") {
      open.emplace_back(std::string(call_id), at);
    } else if (type == "function_call_output") {
      open.erase(std::remove_if(open.begin(), open.end(), [&](const auto& c) { return c.first == call_id; }), open.end());
    } else if (!open.empty()) {
      return unanswered("before the next message (" + at + ")");
    }
  }
  if (!open.empty()) unanswered("before the input ends");
}

// `tools`: the flat function tools ({type, name, description, parameters, strict}) as chat's
// ({type, function: {...}}); the hosted tools (web search, file search, computer use...) are
// not here.
void write_tools(reader& r, json_writer& w, response_settings& set) {
  auto t = r.get("tools");
  if (!t) return;
  if (!t->is_array()) return r.wrong("tools", "an array", *t);
  set.tools_json = simdjson::minify(*t);
  if (dom::array(*t).size() == 0) return;  // the client's default: no tools (chat refuses an empty list)
  w.key("tools").begin_array();
  size_t i = 0;
  for (dom::element tool : dom::array(*t)) {
    const std::string at = "tools[" + std::to_string(i++) + "]";
    if (!tool.is_object()) {
      r.err = bad_request("'" + at + "' must be an object", at);
      return;
    }
    reader tr{dom::object(tool), std::nullopt, at + "."};
    std::string type;
    tr.str("type", type);
    if (!tr.err && type != "function")
      tr.err = bad_request("'" + at + ".type' \"" + type + "\" is not supported by this server: it calls functions only",
                           at + ".type", "unsupported_field");
    detail::known_fields(tr, {"type", "name", "description", "parameters", "strict"});
    if (tr.err) {
      r.err = tr.err;
      return;
    }
    w.begin_object().field("type", "function").key("function").begin_object();
    for (const char* k : {"name", "description", "parameters", "strict"})
      if (auto v = tr.get(k)) w.key(k).raw(simdjson::minify(*v));
    w.end_object().end_object();
  }
  w.end_array();
}

// `tool_choice`: "auto", "none", "required" as chat's; {type: "function", name} as chat's
// {type: "function", function: {name}}; other kinds (hosted tools, allowed_tools) refused.
void write_tool_choice(reader& r, json_writer& w, response_settings& set) {
  auto c = r.get("tool_choice");
  if (!c) return;
  set.tool_choice_json = simdjson::minify(*c);
  // Without tools, "auto" and "none" are what happens anyway (chat wants tools with a choice).
  auto t = r.get("tools");
  const bool no_tools = !t || (t->is_array() && dom::array(*t).size() == 0);
  if (c->is_string() && no_tools && (std::string_view(*c) == "auto" || std::string_view(*c) == "none")) return;
  if (c->is_string()) {
    w.key("tool_choice").value(std::string_view(*c));
    return;
  }
  if (!c->is_object()) return r.wrong("tool_choice", "a string or an object", *c);
  reader cr{dom::object(*c), std::nullopt, "tool_choice."};
  std::string type, name;
  cr.str("type", type);
  if (!cr.err && type != "function")
    cr.err = bad_request("'tool_choice.type' \"" + type + "\" is not supported by this server: it calls functions only",
                         "tool_choice.type", "unsupported_field");
  detail::known_fields(cr, {"type", "name"});
  cr.str("name", name);
  if (!cr.err && !cr.get("name")) cr.err = bad_request("'tool_choice.name' is required", "tool_choice.name");
  if (cr.err) {
    r.err = cr.err;
    return;
  }
  w.key("tool_choice").begin_object().field("type", "function");
  w.key("function").begin_object().field("name", name).end_object().end_object();
}

// `text`: {format: {type: "text" | "json_object" | "json_schema", name, schema, strict,
// description}} as chat's response_format; `verbosity` is not a setting this model has.
void write_text(reader& r, json_writer& w, response_settings& set) {
  auto t = r.get("text");
  if (!t) return;
  if (!t->is_object()) return r.wrong("text", "an object", *t);
  reader tr{dom::object(*t), std::nullopt, "text."};
  detail::known_fields(tr, {"format", "verbosity"});
  std::string verbosity;
  tr.str("verbosity", verbosity);
  if (!tr.err && tr.get("verbosity") && verbosity != "medium")
    tr.err = bad_request("'text.verbosity' is not supported by this server: the model has no verbosity setting",
                         "text.verbosity", "unsupported_field");
  if (auto f = tr.get("format"); f && !tr.err) {
    if (!f->is_object()) {
      tr.wrong("format", "an object", *f);
    } else {
      set.text_format_json = simdjson::minify(*f);
      reader fr{dom::object(*f), std::nullopt, "text.format."};
      std::string type;
      fr.str("type", type);
      if (!fr.err && type != "text" && type != "json_object" && type != "json_schema")
        fr.err = bad_request("'text.format.type' \"" + type + "\" is not served: it must be \"text\", \"json_object\" or "
                             "\"json_schema\"",
                             "text.format.type", "unsupported_field");
      detail::known_fields(fr, {"type", "name", "schema", "strict", "description"});
      if (!fr.err && type != "json_schema")
        for (const char* k : {"name", "schema", "strict", "description"})
          if (!fr.err && fr.get(k))
            fr.err = bad_request("'text.format." + std::string(k) + "' belongs to a json_schema format, not \"" + type + "\"",
                                 "text.format." + std::string(k));
      if (!fr.err && type == "json_object") {
        w.key("response_format").begin_object().field("type", "json_object").end_object();
      } else if (!fr.err && type == "json_schema") {
        w.key("response_format").begin_object().field("type", "json_schema").key("json_schema").begin_object();
        for (const char* k : {"name", "schema", "strict", "description"})
          if (auto v = fr.get(k)) w.key(k).raw(simdjson::minify(*v));
        w.end_object().end_object();
      }
      if (fr.err) tr.err = fr.err;
    }
  }
  if (tr.err) r.err = tr.err;
}

// Fields that are there in the API but not honoured here: refused by name when they ask for
// something (their null or default value is what the server does anyway).
void refuse_unhonoured(reader& r) {
  if (auto b = r.get("background"); b && !r.err && !(b->is_bool() && !bool(*b)))
    r.err = bad_request("'background' is not supported by this server: responses are answered in the request",
                        "background", "unsupported_field");
  std::string truncation;
  r.str("truncation", truncation);
  if (!r.err && r.get("truncation") && truncation != "disabled")
    r.err = bad_request("'truncation' \"" + truncation +
                            "\" is not supported by this server: an input over the context is refused (\"disabled\")",
                        "truncation", "unsupported_field");
  if (auto re = r.get("reasoning"); re && !r.err) {
    bool asks = !re->is_object();
    if (!asks)
      for (auto kv : dom::object(*re))
        if (!kv.value.is_null() && !(kv.key == "effort" && kv.value.is_string() && std::string_view(kv.value) == "none"))
          asks = true;
    if (asks)
      r.err = bad_request("'reasoning' is not supported by this server: the model is not a reasoning model", "reasoning",
                          "unsupported_field");
  }
  if (auto inc = r.get("include"); inc && !r.err) {
    if (!inc->is_array()) return r.wrong("include", "an array of strings", *inc);
    size_t i = 0;
    for (dom::element e : dom::array(*inc)) {
      const std::string at = "include[" + std::to_string(i++) + "]";
      if (!e.is_string() || std::string_view(e) != include_logprobs) {
        r.err = bad_request("'" + at + "' is not supported by this server: the only entry it includes is \"" +
                                std::string(include_logprobs) + "\"",
                            at, "unsupported_field");
        return;
      }
    }
  }
  detail::refuse(r, "max_tool_calls", "a bound on the calls of one response is not served (parallel_tool_calls: false allows one)");
  detail::refuse(r, "prompt", "stored prompt templates are not served");
  detail::refuse(r, "conversation", "conversations are not stored: use previous_response_id");
  detail::prompt_cache_fields(r);
  detail::refuse(r, "access_programs", "there are no access programs here");
  detail::refuse(r, "background_options", "responses are answered in the request ('background' is not served)");
  detail::refuse(r, "context_management", "an input over the context is refused, not compacted");
  detail::refuse(r, "image", "this server answers in text only");
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// A chat parse error in this API's words. A chat message's index is not an input item's (the
// instructions come first, calls fold into one turn), so 'messages[i]' names the input as a whole.
api_error responses_error(api_error e) {
  e.param = e.param.empty() ? e.param : responses_param(e.param);
  replace_all(e.message, "max_completion_tokens", "max_output_tokens");
  replace_all(e.message, "response_format.json_schema", "text.format");
  replace_all(e.message, "response_format", "text.format");
  static const std::regex message_at(R"(messages\[[0-9]+\])");
  e.message = std::regex_replace(e.message, message_at, "input");
  replace_all(e.message, "tool_call_id", "call_id");
  replace_all(e.message, "an earlier assistant message's 'tool_calls'", "an earlier function_call item");
  static const std::regex function_field(R"((tools\[[0-9]+\]|tool_choice)\.function\.)");
  e.message = std::regex_replace(e.message, function_field, "$1.");
  return e;
}

}  // namespace

std::string responses_param(std::string_view p) {
  std::string s(p);
  if (s.rfind("messages", 0) == 0) return "input";
  if (s == "max_completion_tokens") return "max_output_tokens";
  if (s == "logprobs") return "include";
  replace_all(s, "response_format.json_schema", "text.format");
  replace_all(s, "response_format", "text.format");
  if (s.rfind("tools[", 0) == 0 || s.rfind("tool_choice", 0) == 0) replace_all(s, ".function", "");
  return s;
}

parsed_item_list input_items_json(const std::string& response_id, const std::vector<std::string>& items,
                                  std::string_view query) {
  parsed_item_list out;
  bool ascending = false;  // OpenAI's default order: the last input item first
  size_t limit = 20;
  std::string after;
  std::vector<std::string> seen;
  for (const auto& [k, v] : query_params(query)) {
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
      out.error = bad_request("query parameter '" + k + "' is given twice", k);
      return out;
    }
    seen.push_back(k);
    size_t n = 0;
    const bool number = std::from_chars(v.data(), v.data() + v.size(), n).ptr == v.data() + v.size() && !v.empty();
    if (k == "order" && (v == "asc" || v == "desc")) {
      ascending = v == "asc";
    } else if (k == "limit" && number && n >= 1 && n <= 100) {
      limit = n;
    } else if (k == "after") {
      after = v;
    } else if (k == "include[]" || k == "include") {
      // What include adds to input items (image URLs, file contents) is not kept here.
      out.error = bad_request("query parameter '" + k + "' is not served: input items are listed as they were given",
                              k, "unsupported_field");
      return out;
    } else {
      out.error = bad_request("query parameter '" + k + "=" + v.substr(0, 64) +
                                  "' is not valid here: input_items takes order (asc or desc), limit (1 to 100) "
                                  "and after",
                              k);
      return out;
    }
  }
  const std::string base = "item_" + response_id.substr(response_id.find('_') + 1) + "_";
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = ascending ? i : order.size() - 1 - i;
  size_t from = 0;
  if (!after.empty()) {
    while (from < order.size() && base + std::to_string(order[from]) != after) ++from;
    if (from == order.size()) {
      out.error = bad_request("query parameter 'after': '" + after + "' is not an input item of response '" +
                                  response_id + "'",
                              "after");
      return out;
    }
    ++from;  // the one after it
  }
  json_writer w;
  w.begin_object().field("object", "list").key("data").begin_array();
  std::string first, last;
  size_t shown = 0;
  for (size_t k = from; k < order.size() && shown < limit; ++k, ++shown) {
    const std::string id = base + std::to_string(order[k]);
    if (first.empty()) first = id;
    last = id;
    w.raw("{\"id\":\"" + id + "\"," + items[order[k]].substr(1));
  }
  w.end_array();
  w.key("first_id");
  if (first.empty()) w.null(); else w.value(first);
  w.key("last_id");
  if (last.empty()) w.null(); else w.value(last);
  w.field("has_more", from + shown < order.size()).end_object();
  out.json = w.take();
  return out;
}

api_error unknown_response(const std::string& id, std::string param) {
  api_error e;
  e.status = 404;
  e.code = "not_found";
  e.message = "response '" + id +
              "' is not stored here (never made, deleted, evicted from the bounded store, made with store: false, "
              "or not answered yet: a response is stored once its answer is complete)";
  e.param = std::move(param);
  return e;
}

namespace {

// The response named by previous_response_id ended in calls: the input must open with an output
// for each (else OpenAI's "No tool output found for function call ..."), said here in the
// Responses API's terms rather than as the chat history it becomes.
std::optional<api_error> unanswered_earlier_calls(const std::string& conversation, dom::object request,
                                                  const std::string& previous_id) {
  dom::parser parser;  // its own: `request` lives in the caller's
  dom::array messages;
  if (parser.parse("[" + conversation + "]").get(messages) != simdjson::SUCCESS || messages.size() == 0)
    return std::nullopt;
  dom::element last;
  for (dom::element m : messages) last = m;
  std::string_view role;
  dom::array calls;
  if (last["role"].get(role) != simdjson::SUCCESS || role != "assistant" || last["tool_calls"].get(calls) != simdjson::SUCCESS)
    return std::nullopt;
  std::vector<std::string> open;
  for (dom::element c : calls) {
    std::string_view id;
    if (c["id"].get(id) == simdjson::SUCCESS) open.emplace_back(id);
  }
  dom::array input;
  if (request["input"].get(input) == simdjson::SUCCESS)
    for (dom::element item : input) {
      std::string_view type, call_id;
      if (item["type"].get(type) != simdjson::SUCCESS || type != "function_call_output") break;
      if (item["call_id"].get(call_id) == simdjson::SUCCESS)
        open.erase(std::remove(open.begin(), open.end(), std::string(call_id)), open.end());
    }
  if (open.empty()) return std::nullopt;
  std::string ids;
  for (const auto& id : open) ids += (ids.empty() ? "" : ", ") + id;
  return bad_request("No tool output found for function call " + ids + " of response " + previous_id +
                         " (previous_response_id): the input must open with a function_call_output item for each",
                     "input");
}

}  // namespace

parsed_responses parse_responses_request(std::string_view body, const conversation_lookup& previous) {
  parsed_responses out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  // Every field of the API's create call is passed on to the chat parser, read here, or refused by
  // name (docs/protocol.md lists which); any other is "unknown field", as on the chat endpoint.
  for (auto kv : obj) {
    if (std::find(std::begin(passed_fields), std::end(passed_fields), kv.key) != std::end(passed_fields) ||
        std::find(std::begin(own_fields), std::end(own_fields), kv.key) != std::end(own_fields))
      continue;
    out.error = bad_request("unknown field '" + std::string(kv.key) + "'", std::string(kv.key), "unknown_field");
    return out;
  }
  refuse_unhonoured(r);
  responses_request req;
  response_settings& set = req.settings;
  json_writer w;
  w.begin_object();
  for (std::string_view k : passed_fields)
    if (auto v = obj[k]; v.error() == simdjson::SUCCESS) w.key(k).raw(simdjson::minify(v.value_unsafe()));
  r.str("model", set.model);
  r.str("instructions", set.instructions);
  set.has_instructions = !r.err && r.get("instructions").has_value();
  if (auto m = r.get("metadata"); m && m->is_object()) set.metadata_json = simdjson::minify(*m);
  if (r.get("temperature")) {
    double t = 1;
    r.number("temperature", t);
    set.temperature = t;
  }
  if (r.get("top_p")) {
    double p = 1;
    r.number("top_p", p);
    set.top_p = p;
  }
  if (r.get("max_output_tokens")) {
    int64_t m = 0;
    r.integer("max_output_tokens", m);
    set.max_output_tokens = m;
    if (!r.err) w.field("max_completion_tokens", m);
  }
  r.boolean("parallel_tool_calls", set.parallel_tool_calls);
  r.str("user", set.user);
  r.str("prompt_cache_key", set.prompt_cache_key);
  r.str("safety_identifier", set.safety_identifier);
  set.has_user = !r.err && r.get("user").has_value();
  r.boolean("store", set.store);
  r.str("previous_response_id", set.previous_response_id);
  // Logprobs: asked by the include entry (OpenAI's way), or by top_logprobs alone.
  bool logprobs = false;
  if (auto inc = r.get("include"); inc && inc->is_array()) logprobs = dom::array(*inc).size() > 0;
  r.integer("top_logprobs", set.top_logprobs);
  if (!r.err && (set.top_logprobs < 0 || set.top_logprobs > 20))
    r.err = bad_request("'top_logprobs' must be in [0, 20]", "top_logprobs");
  if (!r.err && (logprobs || set.top_logprobs > 0)) {
    w.field("logprobs", true);
    if (set.top_logprobs > 0) w.field("top_logprobs", set.top_logprobs);
  }
  write_tools(r, w, set);
  write_tool_choice(r, w, set);
  write_text(r, w, set);
  message_list msgs;
  read_input(r, msgs, req.input_items);
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  if (!set.previous_response_id.empty()) {
    auto earlier = previous ? previous(set.previous_response_id) : std::nullopt;
    if (!earlier) {
      out.error = unknown_response(set.previous_response_id, "previous_response_id");
      return out;
    }
    req.conversation = std::move(*earlier);
    if (auto e = unanswered_earlier_calls(req.conversation, obj, set.previous_response_id)) {
      out.error = std::move(*e);
      return out;
    }
  }
  const std::string input = msgs.joined();
  if (!req.conversation.empty() && !input.empty()) req.conversation += ',';
  req.conversation += input;
  w.key("messages").begin_array();
  if (set.has_instructions) w.begin_object().field("role", "system").field("content", set.instructions).end_object();
  if (!req.conversation.empty()) w.raw(req.conversation);
  w.end_array().end_object();
  // The DOM above is this thread's parser's: parsed again from here on.
  auto chat = parse_openai_request(w.str(), true);
  if (!chat.request) {
    out.error = responses_error(std::move(chat.error));
    return out;
  }
  req.chat = std::move(*chat.request);
  // Echoed as sampled: absent, temperature is Troupe's default, 0 (greedy), not OpenAI's 1.
  set.temperature = req.chat.spec.sampling.temperature;
  set.top_p = req.chat.spec.sampling.top_p;
  req.chat.max_tokens_field = "max_output_tokens";
  req.chat.constraint_field = responses_param(req.chat.constraint_field);
  out.request = std::move(req);
  return out;
}

}  // namespace troupe::net

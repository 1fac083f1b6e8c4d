#include "net/responses_assembly.hpp"

#include <algorithm>
#include <ctime>
#include <utility>
#include <variant>

#include <simdjson.h>

#include "net/completion_assembly.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {

namespace {

json_writer event_of(std::string_view type) {
  json_writer w;
  w.begin_object().field("type", type);
  return w;
}

}  // namespace

std::string sse_typed_event(std::string_view type, std::string_view json) {
  std::string s = "event: ";
  s += type;
  s += "\ndata: ";
  s += json;
  s += "\n\n";
  return s;
}

std::optional<api_error> responses_assembly::begin(const responses_request& req, int64_t created,
                                                   const inference& inf) {
  if (auto e = vocabulary_error(req.chat.spec, inf)) return e;
  *this = responses_assembly{};
  inf_ = &inf;
  settings_ = req.settings;
  conversation_ = req.conversation;
  input_items_ = req.input_items;
  id_ = new_answer_id("resp_");
  message_id_ = "msg_" + answer_id_suffix(id_);
  model_ = req.chat.model.empty() ? inf.model_name() : req.chat.model;
  created_ = created;
  completed_at_ = 0;
  streaming_ = req.chat.stream;
  logprobs_ = req.chat.logprobs;
  max_tokens_field_ = req.chat.max_tokens_field;
  constraint_field_ = req.chat.constraint_field;
  tool_parser_ = tool_parser_for(inf, req.chat.spec);
  return std::nullopt;
}

answer_assembly::step responses_assembly::feed(size_t choice, const actors::event& e) {
  step s;
  if (!accepts(choice)) return s;
  if (auto* t = std::get_if<actors::token_event>(&e)) on_token(s, *t);
  else if (auto* d = std::get_if<actors::done_event>(&e)) on_done(s, *d);
  else on_error(s, std::get<actors::error_event>(e));
  return s;
}

answer_assembly::step responses_assembly::open_stream_now() {
  step s;
  if (streaming_ && !ended_) ensure_head(s);
  return s;
}

void responses_assembly::on_token(step& s, const actors::token_event& t) {
  std::vector<token_logprob_entry> lp;
  if (logprobs_) lp.push_back(logprob_entry(*inf_, t));
  if (tool_parser_) return take_deltas(s, tool_parser_->push(t.text), std::move(lp));
  // Tokens whose text the streamer holds back (a possible stop string, part of a UTF-8
  // character) keep their logprobs until that text comes out, as completion_assembly does.
  for (auto& e : lp) held_.add(std::move(e));
  // A delta brings its text's entries: text that starts a token waits for its entry.
  auto piece = held_.release_aligned(t.text);
  take_text(s, piece.text, std::move(piece.entries));
}

// Text of the message, with the logprobs of the tokens that made it.
void responses_assembly::take_text(step& s, std::string_view text, std::vector<token_logprob_entry> lp) {
  // No text may still bring entries: the last one a stop string cut, its kept bytes sent before.
  if (text.empty() && (lp.empty() || message_index_ < 0)) return;
  open_message(s);
  text_ += text;
  if (!streaming_) {
    for (auto& e : lp) logprobs_all_.push_back(std::move(e));
    return;
  }
  json_writer w = event_of("response.output_text.delta");
  w.field("item_id", message_id_).field("output_index", message_index_).field("content_index", int64_t{0});
  w.field("delta", text).key("logprobs");
  write_token_logprobs(w, lp);
  for (auto& e : lp) logprobs_all_.push_back(std::move(e));
  emit(s, "response.output_text.delta", w.take());
}

// What the tool-call parser released: text for the message, calls as function_call items (the
// item when its name is known, then its arguments in pieces). Logprobs go with the message's
// text (a call's markup has none in the response).
void responses_assembly::take_deltas(step& s, const std::vector<structured::tool_call_parser::delta>& ds,
                                     std::vector<token_logprob_entry> lp) {
  for (const auto& d : ds) {
    if (d.call < 0) {
      if (d.content.empty()) continue;
      take_text(s, d.content, std::exchange(lp, {}));
      continue;
    }
    const auto k = static_cast<size_t>(d.call);
    // The next call starts: the one before is whole, and closes first (one item open at a time,
    // as OpenAI streams them).
    if (k >= calls_.size() && streaming_ && !calls_.empty() && !calls_.back().closed) close_call(s, calls_.back());
    if (k >= calls_.size()) {
      const std::string base = answer_id_suffix(id_) + "_" + std::to_string(k);
      calls_.push_back({"fc_" + base, "call_" + answer_id_suffix(id_) + "_0_" + std::to_string(k), d.name, "",
                        next_index_++});
      if (streaming_) {
        ensure_head(s);
        json_writer w = event_of("response.output_item.added");
        w.field("output_index", calls_.back().output_index).key("item").raw(call_item_json(calls_.back(), false));
        emit(s, "response.output_item.added", w.take());
      }
    }
    auto& c = calls_[k];
    if (c.name.empty()) c.name = d.name;
    if (d.arguments.empty()) continue;
    c.arguments += d.arguments;
    if (!streaming_) continue;
    json_writer w = event_of("response.function_call_arguments.delta");
    w.field("item_id", c.item_id).field("output_index", c.output_index).field("delta", d.arguments);
    emit(s, "response.function_call_arguments.delta", w.take());
  }
}

// The message item takes its output_index when its first text comes (or at the end, empty, when
// nothing else was said); streamed, it is announced with its output_text part.
void responses_assembly::open_message(step& s) {
  if (message_index_ >= 0) return;
  message_index_ = next_index_++;
  if (!streaming_) return;
  ensure_head(s);
  json_writer w = event_of("response.output_item.added");
  w.field("output_index", message_index_).key("item").raw(message_item(false));
  emit(s, "response.output_item.added", w.take());
  json_writer p = event_of("response.content_part.added");
  p.field("item_id", message_id_).field("output_index", message_index_).field("content_index", int64_t{0});
  p.key("part").begin_object().field("type", "output_text").field("text", "");
  p.key("annotations").begin_array().end_array().key("logprobs").begin_array().end_array().end_object();
  emit(s, "response.content_part.added", p.take());
}

void responses_assembly::on_done(step& s, const actors::done_event& d) {
  // A deadline that passed before the first token is a 504, as for chat (completion_assembly):
  // a response with no text would read as an empty answer.
  if (d.finish_reason == actors::finish::deadline && d.usage.completion_tokens == 0 && d.text.empty() && !head_sent_)
    return on_error(s, actors::error_event{d.request_id, actors::errc::deadline,
                                           "the deadline (deadline_ms) passed before the first token", 0});
  finish_reason_ = d.finish_reason;
  usage_ = d.usage;
  completed_at_ = static_cast<int64_t>(std::time(nullptr));
  if (tool_parser_) {
    auto ds = tool_parser_->push(d.text);
    auto rest = tool_parser_->finish();
    ds.insert(ds.end(), rest.begin(), rest.end());
    take_deltas(s, ds, {});
    // The parser's calls are the answer's (what was streamed adds up to them).
    const auto& parsed = tool_parser_->calls();
    for (size_t j = 0; j < parsed.size() && j < calls_.size(); ++j) {
      calls_[j].name = parsed[j].name;
      calls_[j].arguments = parsed[j].arguments;
    }
  } else {
    auto piece = held_.finish_aligned(d.text);
    take_text(s, piece.text, std::move(piece.entries));
  }
  if (message_index_ < 0 && calls_.empty()) open_message(s);
  ended_ = true;
  answered_ = true;
  if (!streaming_) {
    s.answer = response_object(false);
    return;
  }
  ensure_head(s);
  close_items(s);
  const std::string st = status();
  const std::string type = st == "completed" ? "response.completed" : "response.incomplete";
  json_writer w = event_of(type);
  w.key("response").raw(response_object(false));
  emit(s, type, w.take());
  s.end_stream = true;
}

// The items' done events, in output order: the message's text and part, each call's arguments,
// then each item as it stands.
void responses_assembly::close_items(step& s) {
  for (int32_t i = 0; i < next_index_; ++i) {
    if (i == message_index_) {
      json_writer t = event_of("response.output_text.done");
      t.field("item_id", message_id_).field("output_index", i).field("content_index", int64_t{0});
      t.field("text", text_).key("logprobs");
      write_token_logprobs(t, logprobs_all_);
      emit(s, "response.output_text.done", t.take());
      json_writer p = event_of("response.content_part.done");
      p.field("item_id", message_id_).field("output_index", i).field("content_index", int64_t{0});
      p.key("part").begin_object().field("type", "output_text").field("text", text_);
      p.key("annotations").begin_array().end_array().key("logprobs");
      write_token_logprobs(p, logprobs_all_);
      p.end_object();
      emit(s, "response.content_part.done", p.take());
      json_writer d = event_of("response.output_item.done");
      d.field("output_index", i).key("item").raw(message_item(true));
      emit(s, "response.output_item.done", d.take());
      continue;
    }
    for (auto& c : calls_)
      if (c.output_index == i && !c.closed) close_call(s, c);
  }
}

// A call's arguments and item are done.
void responses_assembly::close_call(step& s, call_item& c) {
  json_writer a = event_of("response.function_call_arguments.done");
  a.field("item_id", c.item_id).field("output_index", c.output_index).field("name", c.name).field("arguments", c.arguments);
  emit(s, "response.function_call_arguments.done", a.take());
  json_writer d = event_of("response.output_item.done");
  d.field("output_index", c.output_index).key("item").raw(call_item_json(c, true));
  emit(s, "response.output_item.done", d.take());
  c.closed = true;
}

// The request failed: before the stream's head it is the HTTP answer; after, an `error` event
// ends the stream (the Responses stream has no [DONE] line).
void responses_assembly::on_error(step& s, const actors::error_event& err) {
  ended_ = true;
  s.cancel = true;
  api_error ae = from_pipeline_error(err, "input", max_tokens_field_, constraint_field_);
  if (!head_sent_) {
    if (ae.status == 429 || ae.status == 503) s.retry_after_s = std::max<int64_t>(1, (err.retry_after_ms + 999) / 1000);
    s.error = std::move(ae);
    return;
  }
  json_writer w = event_of("error");
  w.key("code");
  if (ae.code.empty()) w.null();
  else w.value(ae.code);
  w.field("message", ae.message).key("param");
  if (ae.param.empty()) w.null();
  else w.value(ae.param);
  emit(s, "error", w.take());
  s.end_stream = true;
}

void responses_assembly::ensure_head(step& s) {
  if (head_sent_) return;
  head_sent_ = true;
  s.open_stream = true;
  for (const char* type : {"response.created", "response.in_progress"}) {
    json_writer w = event_of(type);
    w.key("response").raw(response_object(true));
    emit(s, type, w.take());
  }
}

// `body`: an event object still open, its `type` written first; its sequence_number closes it.
void responses_assembly::emit(step& s, std::string_view type, std::string body) {
  body.insert(body.size(), ",\"sequence_number\":" + std::to_string(sequence_++) + "}");
  s.events.push_back(sse_typed_event(type, body));
}

std::string responses_assembly::status() const {
  if (!answered_) return "in_progress";
  if (finish_reason_ == actors::finish::stop || finish_reason_ == "tool_calls") return "completed";
  return "incomplete";
}

std::string responses_assembly::message_item(bool done) const {
  json_writer w;
  w.begin_object().field("id", message_id_).field("type", "message");
  w.field("status", !done ? "in_progress" : status() == "incomplete" ? "incomplete" : "completed");
  w.field("role", "assistant").key("content").begin_array();
  if (done) {
    w.begin_object().field("type", "output_text").field("text", text_);
    w.key("annotations").begin_array().end_array().key("logprobs");
    write_token_logprobs(w, logprobs_all_);
    w.end_object();
  }
  w.end_array().end_object();
  return w.take();
}

// A call the answer's end cut short (max_output_tokens, a deadline) is incomplete, as OpenAI marks
// it: an agent must not run a tool with arguments that are not the whole JSON object.
bool responses_assembly::call_complete(const call_item& c) const {
  if (status() != "incomplete") return true;
  simdjson::dom::parser parser;
  simdjson::dom::object args;
  return parser.parse(c.arguments).get(args) == simdjson::SUCCESS;
}

std::string responses_assembly::call_item_json(const call_item& c, bool done) const {
  json_writer w;
  w.begin_object().field("id", c.item_id).field("type", "function_call");
  w.field("status", !done ? "in_progress" : call_complete(c) ? "completed" : "incomplete");
  w.field("call_id", c.call_id).field("name", c.name).field("arguments", done ? c.arguments : std::string());
  w.end_object();
  return w.take();
}

// The response object: in progress (the stream's first events: no output, no usage yet) or as
// answered. The request's settings are echoed as OpenAI echoes them.
std::string responses_assembly::response_object(bool in_progress) const {
  const std::string st = in_progress ? "in_progress" : status();
  json_writer w;
  w.begin_object().field("id", id_).field("object", "response").field("created_at", created_);
  w.key("completed_at");
  if (st == "completed") w.value(completed_at_);
  else w.null();
  w.field("status", st).field("background", false).key("error").null();
  w.key("incomplete_details");
  if (st != "incomplete") {
    w.null();
  } else {
    const std::string reason = finish_reason_ == actors::finish::length     ? "max_output_tokens"
                               : finish_reason_ == actors::finish::filtered ? "content_filter"
                                                                            : finish_reason_;
    w.begin_object().field("reason", reason).end_object();
  }
  w.key("instructions");
  if (settings_.has_instructions) w.value(settings_.instructions);
  else w.null();
  w.key("max_output_tokens");
  if (settings_.max_output_tokens) w.value(*settings_.max_output_tokens);
  else w.null();
  w.key("max_tool_calls").null().field("model", model_);
  w.key("output").begin_array();
  if (!in_progress) {
    for (int32_t i = 0; i < next_index_; ++i) {
      if (i == message_index_) w.raw(message_item(true));
      for (const auto& c : calls_)
        if (c.output_index == i) w.raw(call_item_json(c, true));
    }
  }
  w.end_array();
  w.field("parallel_tool_calls", settings_.parallel_tool_calls).key("previous_response_id");
  if (settings_.previous_response_id.empty()) w.null();
  else w.value(settings_.previous_response_id);
  w.key("reasoning").begin_object().key("effort").null().key("summary").null().end_object();
  w.key("prompt_cache_key");
  if (settings_.prompt_cache_key.empty()) w.null();
  else w.value(settings_.prompt_cache_key);
  w.key("safety_identifier");
  if (settings_.safety_identifier.empty()) w.null();
  else w.value(settings_.safety_identifier);
  w.field("service_tier", "default").field("store", settings_.store);
  w.field("temperature", settings_.temperature.value_or(0.0));
  w.key("text").begin_object().key("format").raw(settings_.text_format_json).field("verbosity", "medium").end_object();
  w.key("tool_choice").raw(settings_.tool_choice_json).key("tools").raw(settings_.tools_json);
  w.field("top_logprobs", settings_.top_logprobs).field("top_p", settings_.top_p.value_or(1.0));
  w.field("truncation", "disabled").key("usage");
  if (in_progress) {
    w.null();
  } else {
    w.begin_object().field("input_tokens", usage_.prompt_tokens);
    w.key("input_tokens_details").begin_object().field("cached_tokens", usage_.cached_prompt_tokens);
    w.field("cache_write_tokens", int64_t{0}).end_object();
    w.field("output_tokens", usage_.completion_tokens);
    w.key("output_tokens_details").begin_object().field("reasoning_tokens", int64_t{0}).end_object();
    w.field("total_tokens", usage_.prompt_tokens + usage_.completion_tokens).end_object();
  }
  w.key("user");
  if (settings_.has_user) w.value(settings_.user);
  else w.null();
  w.key("metadata").raw(settings_.metadata_json);
  w.end_object();
  return w.take();
}

// The answer as the chat message a later request continues from (previous_response_id).
std::string responses_assembly::stored_conversation() const {
  json_writer w;
  w.begin_object().field("role", "assistant").key("content");
  if (text_.empty() && !calls_.empty()) w.null();
  else w.value(text_);
  if (!calls_.empty()) {
    w.key("tool_calls").begin_array();
    for (const auto& c : calls_) {
      w.begin_object().field("id", c.call_id).field("type", "function");
      w.key("function").begin_object().field("name", c.name).field("arguments", c.arguments).end_object();
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  return conversation_.empty() ? w.take() : conversation_ + "," + w.take();
}

}  // namespace troupe::net

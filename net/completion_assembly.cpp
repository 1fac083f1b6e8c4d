#include "net/completion_assembly.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <utility>
#include <variant>

namespace troupe::net {

namespace {

std::atomic<uint64_t> next_completion_id{1};
// Completion ids are this process's random prefix and a count ("chatcmpl-3f9c0a1b2c4d5e6f-12"), so
// that ids (and the tool-call ids made from them) from before a restart are never given again.
const std::string completion_id_prefix = [] {
  std::random_device rd;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08x%08x", rd(), rd());
  return std::string(hex);
}();

}  // namespace

std::string new_answer_id(std::string_view prefix) {
  return std::string(prefix) + completion_id_prefix + "-" + std::to_string(next_completion_id.fetch_add(1));
}

std::string new_completion_id(bool chat) { return new_answer_id(chat ? "chatcmpl-" : "cmpl-"); }

std::string answer_id_suffix(std::string_view id) {
  const size_t dash = id.find('-');
  const size_t us = id.find('_');
  const size_t at = std::min(dash, us);
  return std::string(at == std::string_view::npos ? id : id.substr(at + 1));
}

// logit_bias ids are checked against the vocabulary, which only the pipeline knows.
std::optional<api_error> vocabulary_error(const actors::request_spec& spec, const inference& inf) {
  if (const int32_t nv = inf.vocab_size(); nv > 0) {
    for (const auto& b : spec.sampling.logit_bias) {
      if (b.token < nv) continue;
      const std::string at = "logit_bias." + std::to_string(b.token);
      return bad_request("'" + at + "': token " + std::to_string(b.token) + " is outside the vocabulary (0.." +
                             std::to_string(nv - 1) + ")",
                         at);
    }
  }
  return std::nullopt;
}

std::optional<api_error> completion_assembly::begin(const openai_request& req, bool chat, int64_t created,
                                                    const inference& inf) {
  if (auto e = vocabulary_error(req.spec, inf)) return e;
  inf_ = &inf;
  chat_ = chat;
  streaming_ = req.stream;
  include_usage_ = req.include_usage;
  max_tokens_field_ = req.max_tokens_field;
  constraint_field_ = req.constraint_field;
  logprobs_ = req.logprobs;
  per_prompt_ = static_cast<size_t>(req.n);
  batch_ = req.batch;
  echoes_.clear();
  if (req.echo) {
    auto text_of = [&inf](const std::string& text, const std::vector<int32_t>& tokens) {
      std::string t = text;
      for (int32_t id : tokens) t += inf.token_piece(id);  // a token-id prompt: its text
      return t;
    };
    if (req.batch.empty()) echoes_.push_back(text_of(req.spec.prompt, req.spec.prompt_tokens));
    for (const auto& p : req.batch) echoes_.push_back(text_of(p.text, p.tokens));
  }
  head_ = completion_result{};
  head_.id = new_completion_id(chat);
  head_.created = created;
  head_.model = req.model.empty() ? inf.model_name() : req.model;
  head_.logprobs = req.logprobs;
  // With `echo` no logprobs are given (refused): the base is written only when it is 0.
  head_.text_offset_base = echoes_.empty() ? 0 : utf8_chars(echoes_.front());
  choices_.clear();
  choices_.resize(static_cast<size_t>(req.n) * std::max<size_t>(1, req.batch.size()));
  if (chat_)
    for (auto& c : choices_) c.tool_parser = tool_parser_for(inf, req.spec);
  n_ended_ = 0;
  others_submitted_ = choices_.size() == 1;
  head_sent_ = false;
  ended_ = false;
  return std::nullopt;
}

completion_assembly::step completion_assembly::feed(size_t i, const actors::event& e) {
  step s;
  if (!accepts(i)) return s;
  // Choices 1.. start once choice 0's first event is in (why: http_session_completion.cpp, submit_choice).
  if (!others_submitted_ && i == 0 && !std::holds_alternative<actors::error_event>(e)) {
    others_submitted_ = true;
    s.submit_others = true;
  }
  if (auto* t = std::get_if<actors::token_event>(&e))
    on_token(s, i, *t);
  else
    on_final(s, i, e);
  return s;
}

token_logprob_entry logprob_entry(const inference& inf, const actors::token_event& t) {
  token_logprob_entry out;
  out.piece = inf.token_piece(t.token);
  out.logprob = t.logprob;
  for (const auto& alt : t.top) out.top.emplace_back(inf.token_piece(alt.token), alt.logprob);
  return out;
}

std::string completion_assembly::chunk(const chunk_spec& c) const {
  return sse_event(chat_ ? chat_chunk_json(head_, c) : text_chunk_json(head_, c));
}

// A token event of choice i: buffered (whole answers) or streamed as chunks.
void completion_assembly::on_token(step& s, size_t i, const actors::token_event& t) {
  auto& c = choices_[i];
  std::vector<token_logprob_entry> lp;
  if (c.tool_parser) {
    if (logprobs_) lp.push_back(logprob_entry(*inf_, t));
    auto ds = c.tool_parser->push(t.text);
    if (!streaming_) {
      for (const auto& d : ds) c.text += d.content;
      if (logprobs_) c.logprobs.push_back(std::move(lp.front()));
      return;
    }
    return stream_tool_deltas(s, i, ds, logprobs_ ? &lp : nullptr);
  }
  // A chunk brings its text's entries: text that starts a token waits for its entry.
  std::string text = t.text;
  if (logprobs_) {
    c.held_logprobs.add(logprob_entry(*inf_, t));
    auto piece = c.held_logprobs.release_aligned(t.text);
    text = std::move(piece.text);
    lp = std::move(piece.entries);
  }
  if (!streaming_) {
    c.text += text;
    for (auto& e : lp) c.logprobs.push_back(std::move(e));
    return;
  }
  if (text.empty() && lp.empty()) return;
  ensure_head(s);
  queue_text_chunk(s, i, text, lp);
}

// A streamed chunk of choice i's text with the logprobs of the tokens that made it.
void completion_assembly::queue_text_chunk(step& s, size_t i, std::string_view text,
                                           const std::vector<token_logprob_entry>& lp) {
  auto& c = choices_[i];
  chunk_spec cs;
  cs.index = static_cast<int32_t>(i);
  cs.text = text;
  if (logprobs_) {
    cs.logprobs = &lp;
    cs.text_offset = head_.text_offset_base + c.piece_chars;
    for (const auto& e : lp) c.piece_chars += utf8_chars(e.piece);
  }
  s.events.push_back(chunk(cs));
}

// Choice i's done or error event.
void completion_assembly::on_final(step& s, size_t i, const actors::event& e) {
  auto* d = std::get_if<actors::done_event>(&e);
  if (!d) return on_error(s, std::get<actors::error_event>(e));
  // A deadline that passed before the first token (in the queue, or during the prompt's
  // prefill) is a 504, as the error event of one that passed while queued is: a 200 with no
  // text would read as an empty answer. (With n > 1 the other choices' text stands.)
  if (d->finish_reason == actors::finish::deadline && d->usage.completion_tokens == 0 && d->text.empty() &&
      choices_.size() == 1 && !head_sent_)
    return on_error(s, actors::error_event{d->request_id, actors::errc::deadline,
                                           "the deadline (deadline_ms) passed before the first token", 0});
  auto& c = choices_[i];
  c.ended = true;
  c.finish_reason = d->finish_reason;
  c.usage = d->usage;
  ++n_ended_;
  if (c.tool_parser) {
    auto ds = c.tool_parser->push(d->text);
    auto rest = c.tool_parser->finish();
    ds.insert(ds.end(), rest.begin(), rest.end());
    if (!c.tool_parser->calls().empty() && c.finish_reason == actors::finish::stop) c.finish_reason = "tool_calls";
    if (!streaming_) {
      for (const auto& x : ds) c.text += x.content;
    } else {
      stream_tool_deltas(s, i, ds, nullptr);
      chunk_spec cs;
      cs.index = static_cast<int32_t>(i);
      cs.finish_reason = c.finish_reason;
      s.events.push_back(chunk(cs));
    }
  } else {
    // The held text that comes out at the end brings its tokens' logprobs; a stop string that
    // cut the text inside a token cuts its entry (logprob_cover).
    std::vector<token_logprob_entry> lp;
    std::string text = d->text;
    if (logprobs_) {
      auto piece = c.held_logprobs.finish_aligned(d->text);
      text = std::move(piece.text);
      lp = std::move(piece.entries);
    }
    if (!streaming_) {
      c.text += text;
      for (auto& x : lp) c.logprobs.push_back(std::move(x));
    } else {
      ensure_head(s);
      if (!text.empty() || !lp.empty()) queue_text_chunk(s, i, text, lp);
      chunk_spec cs;
      cs.index = static_cast<int32_t>(i);
      cs.finish_reason = d->finish_reason;
      s.events.push_back(chunk(cs));
    }
  }
  if (n_ended_ < choices_.size()) return;
  ended_ = true;
  const actors::usage_info usage = summed_usage();
  if (!streaming_) {
    completion_result r = head_;
    r.usage = usage;
    for (size_t k = 0; k < choices_.size(); ++k) {
      auto& ch = choices_[k];
      std::vector<actors::tool_call> calls;
      if (ch.tool_parser)
        for (size_t j = 0; j < ch.tool_parser->calls().size(); ++j)
          calls.push_back({call_id(k, j), ch.tool_parser->calls()[j].name, ch.tool_parser->calls()[j].arguments});
      r.choices.push_back({echo_of(k) + ch.text, ch.finish_reason, std::move(ch.logprobs), std::move(calls),
                           ch.tool_parser && ch.tool_parser->forced()});
    }
    s.answer = chat_ ? chat_completion_json(r) : text_completion_json(r);
    return;
  }
  if (include_usage_) {
    chunk_spec u;
    u.usage = &usage;
    u.no_choices = true;
    s.events.push_back(chunk(u));
  }
  s.end_stream = true;
}

// One choice failed: the answer fails, the other choices stop. Before the stream's head it is the
// HTTP answer; after, an SSE error event ends the stream.
void completion_assembly::on_error(step& s, const actors::error_event& err) {
  ended_ = true;
  s.cancel = true;
  api_error ae = from_pipeline_error(err, chat_ ? "messages" : "prompt", max_tokens_field_, constraint_field_);
  if (!head_sent_) {
    if (ae.status == 429 || ae.status == 503) s.retry_after_s = std::max<int64_t>(1, (err.retry_after_ms + 999) / 1000);
    s.error = std::move(ae);
    return;
  }
  s.events.push_back(sse_event(error_json(ae)));
  s.end_stream = true;
}

// Each prompt is counted once (its first choice's, with its prefix-cache share), as OpenAI counts a
// batch; the completions (and their speculation) add up.
actors::usage_info completion_assembly::summed_usage() const {
  actors::usage_info usage;
  for (size_t k = 0; k < choices_.size(); ++k) {
    const auto& u = choices_[k].usage;
    if (k % per_prompt_ == 0) {
      usage.prompt_tokens += u.prompt_tokens;
      usage.cached_prompt_tokens += u.cached_prompt_tokens;
    }
    usage.completion_tokens += u.completion_tokens;
    usage.speculative_proposed += u.speculative_proposed;
    usage.speculative_accepted += u.speculative_accepted;
  }
  return usage;
}

// A batch's prompt p has choices p * n .. p * n + n - 1; choice j of a prompt samples with seed + j,
// as that prompt alone would.
actors::request_spec completion_assembly::choice_spec(size_t choice, const actors::request_spec& spec) const {
  actors::request_spec s = spec;
  s.sampling.seed += choice % per_prompt_;
  if (!batch_.empty()) {
    const auto& p = batch_[std::min(batch_.size() - 1, choice / per_prompt_)];
    s.prompt = p.text;
    s.prompt_tokens = p.tokens;
  }
  return s;
}

const std::string& completion_assembly::echo_of(size_t choice) const {
  static const std::string none;
  return echoes_.empty() ? none : echoes_[std::min(echoes_.size() - 1, choice / per_prompt_)];
}

// A tool call's id: unique per completion and choice, as OpenAI's `call_...`.
std::string completion_assembly::call_id(size_t choice, size_t call) const {
  return "call_" + answer_id_suffix(head_.id) + "_" + std::to_string(choice) + "_" + std::to_string(call);
}

// Streams what the tool-call parser released: content as `delta.content`, calls as
// `delta.tool_calls` (id, type and name first, then the arguments in pieces). The token's
// logprobs (when asked) ride on the first chunk, or on an empty one.
void completion_assembly::stream_tool_deltas(step& s, size_t i,
                                             const std::vector<structured::tool_call_parser::delta>& ds,
                                             const std::vector<token_logprob_entry>* lp) {
  ensure_head(s);
  for (const auto& d : ds) {
    chunk_spec cs;
    cs.index = static_cast<int32_t>(i);
    std::string id;
    if (d.call < 0) {
      if (d.content.empty()) continue;
      cs.text = d.content;
    } else {
      cs.call_index = d.call;
      if (!d.name.empty()) {
        id = call_id(i, static_cast<size_t>(d.call));
        cs.call_id = id;
        cs.call_name = d.name;
      }
      cs.call_arguments = d.arguments;
    }
    cs.logprobs = lp;
    lp = nullptr;
    s.events.push_back(chunk(cs));
  }
  if (lp) {
    chunk_spec cs;
    cs.index = static_cast<int32_t>(i);
    cs.logprobs = lp;
    s.events.push_back(chunk(cs));
  }
}

// The stream opens (the session writes its head) before the first chunk of any choice; each
// choice opens with its role (chat) or the echoed prompt (completions with `echo`).
completion_assembly::step completion_assembly::open_stream_now() {
  step s;
  if (streaming_ && !ended_) ensure_head(s);
  return s;
}

void completion_assembly::ensure_head(step& s) {
  if (head_sent_) return;
  head_sent_ = true;
  s.open_stream = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    chunk_spec c;
    c.index = static_cast<int32_t>(i);
    if (chat_) {
      c.role_only = true;
      c.calls_only = choices_[i].tool_parser && choices_[i].tool_parser->forced();
    }
    else if (!echo_of(i).empty()) c.text = echo_of(i);
    else continue;
    s.events.push_back(chunk(c));
  }
}

}  // namespace troupe::net

#include "actors/admission/admission_state.hpp"

#include <algorithm>
#include <cmath>

#include "actors/admission/gate.hpp"
#include "actors/admission/tool_prompt.hpp"

namespace troupe::actors {

admission_state::admission_state(admission_config cfg, std::shared_ptr<const text_codec> codec,
                                 std::unique_ptr<admission_policy> policy)
    : cfg_(std::move(cfg)), codec_(std::move(codec)), policy_(std::move(policy)) {
  if (policy_) return;
  if (is_admission_actor(cfg_.policy)) {
    gate_ = true;
    return;
  }
  auto p = make_admission_policy(cfg_);
  if (p) policy_ = std::move(p.value());
  else policy_error_ = p.error();
}

status admission_state::reconfigure(admission_config cfg) {
  status out;
  if (is_admission_actor(cfg.policy)) {  // the admission actor (admission.cpp) checks its options
    policy_.reset();
    policy_error_.clear();
    gate_ = true;
    cfg_ = std::move(cfg);
    return {};
  }
  if (gate_ || !policy_ || cfg.policy != cfg_.policy || cfg.policy_options != cfg_.policy_options) {
    auto p = make_admission_policy(cfg);
    if (p) {
      policy_ = std::move(p.value());
      policy_error_.clear();
      gate_ = false;
      cfg_ = std::move(cfg);
      return {};
    }
    out = make_error(p.error());
    if (gate_) return out;  // the admission actor stays, with the limits it had
    cfg.policy = cfg_.policy;  // the running policy stays, with the new limits
    cfg.policy_options = cfg_.policy_options;
  }
  if (policy_ && !policy_->reconfigure(cfg))
    if (auto p = make_admission_policy(cfg)) policy_ = std::move(p.value());
  cfg_ = std::move(cfg);
  return out;
}

admission_decision admission_state::reject(const std::string& code, std::string message, int64_t retry_after_ms) {
  ++st_.rejected;
  admission_decision d;
  d.error.code = code;
  d.error.message = std::move(message);
  d.error.retry_after_ms = retry_after_ms;
  return d;
}

// The scheduler refuses a method it cannot make a proposer for (scheduler_state::enqueue), but a
// request the response cache answers never reaches it: the same request would be 200 on a hit
// and 400 on a miss. So the name, and a draft model for "draft", are checked here too, in the
// scheduler's words; loading the draft model stays the scheduler's.
status admission_state::check_speculative(const std::string& method) const {
  if (method.empty() || method == "off") return {};
  if (auto f = proposer_registry().find(method); !f) return make_error("speculative: " + f.error() + "; or \"off\"");
  if (method == "draft" && cfg_.speculative && cfg_.speculative->draft_model.empty())
    return make_error("speculative: speculative.draft_model is not set (the draft method needs a GGUF model with the "
                      "model's vocabulary); or \"off\"");
  return {};
}

admission_decision admission_state::admit(const request_spec& spec, int64_t now_us) {
  if (!spec.model.empty() && spec.model != cfg_.model_name)
    return reject(errc::unknown_model,
                  "model '" + spec.model + "' does not generate text here (this server generates with '" + cfg_.model_name + "')");
  const int n_inputs = (spec.messages.empty() ? 0 : 1) + (spec.prompt.empty() ? 0 : 1) + (spec.prompt_tokens.empty() ? 0 : 1);
  if (n_inputs != 1)
    return reject(errc::invalid_request, "give exactly one of messages, prompt or prompt_tokens");
  if (auto s = spec.sampling.validate(); !s) return reject(errc::invalid_request, s.error());
  if (spec.max_tokens < 0) return reject(errc::invalid_request, "max_tokens must be >= 0");
  if (spec.max_tokens > cfg_.max_tokens_cap)
    return reject(errc::invalid_request, "max_tokens " + std::to_string(spec.max_tokens) + " exceeds this server's cap of " +
                                              std::to_string(cfg_.max_tokens_cap));
  if (spec.deadline_ms < 0) return reject(errc::invalid_request, "deadline_ms must be >= 0");
  if (static_cast<int32_t>(spec.stop.size()) > cfg_.max_stop_strings)
    return reject(errc::invalid_request, "'stop' has more than " + std::to_string(cfg_.max_stop_strings) +
                                             " strings (admission.max_stop_strings)");
  for (const auto& s : spec.stop)
    if (s.empty()) return reject(errc::invalid_request, "'stop' strings must not be empty");
  if (auto s = check_speculative(spec.speculative); !s) return reject(errc::invalid_request, s.error());

  // Tools and structured outputs: the conversation the template renders, and the constraint the
  // sampler keeps to (compiled here, so that a bad schema or grammar is refused by name now).
  std::vector<chat_message> messages = spec.messages;
  structured::constraint_spec constraint = spec.constraint;
  bool by_tools = false;  // the constraint is the tools' (a forced call, a strict tool, ...)
  if (!spec.tools.empty() || spec.tool_choice != tool_choice::automatic ||
      std::any_of(spec.messages.begin(), spec.messages.end(),
                  [](const chat_message& m) { return m.role == "tool" || !m.tool_calls.empty(); })) {
    auto tp = make_tool_prompt(spec, codec_->tool_format());
    if (!tp) return reject(errc::invalid_request, tp.error());
    messages = std::move(tp->messages);
    if (!tp->constraint.empty()) {
      // A forced call's grammar replaces the structured output; a bad schema is still refused.
      if (!spec.constraint.empty())
        if (auto c = codec_->compile_constraint(spec.constraint); !c) return reject(errc::invalid_request, c.error());
      constraint = std::move(tp->constraint);
      by_tools = true;
    }
  }
  if (!constraint.empty()) {
    // The constraint is the request's own, or the one its tools set (a forced call, a strict
    // tool, parallel_tool_calls false): the message says which.
    if (spec.ignore_eos && !by_tools)
      return reject(errc::invalid_request, "'ignore_eos' cannot be combined with a structured output: the output ends where the " +
                                               constraint.kind + " is complete");
    if (spec.ignore_eos)
      return reject(errc::invalid_request,
                    "'ignore_eos' cannot be combined with a forced tool call, a strict tool or parallel_tool_calls "
                    "false: the reply ends where its calls are complete");
    if (auto c = codec_->compile_constraint(constraint); !c) return reject(errc::invalid_request, c.error());
  }

  // Tokenize.
  std::vector<int32_t> prompt;
  if (!spec.prompt_tokens.empty()) {
    for (auto t : spec.prompt_tokens)
      if (t < 0 || (cfg_.n_vocab > 0 && t >= cfg_.n_vocab))
        return reject(errc::invalid_request, "prompt token " + std::to_string(t) + " is outside the vocabulary (0.." +
                                                  std::to_string(cfg_.n_vocab - 1) + ")");
    prompt = spec.prompt_tokens;
  } else {
    auto enc = messages.empty() ? codec_->encode_prompt(spec.prompt) : codec_->encode_chat(messages);
    if (!enc) return reject(errc::invalid_request, enc.error());
    prompt = std::move(*enc);
  }
  if (prompt.empty()) return reject(errc::invalid_request, "the prompt is empty after tokenization");
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  if (cfg_.max_prompt_tokens > 0 && n_prompt > cfg_.max_prompt_tokens)
    return reject(errc::context_length, "the prompt is " + std::to_string(n_prompt) +
                                            " tokens, more than this server accepts (admission.max_prompt_tokens = " +
                                            std::to_string(cfg_.max_prompt_tokens) + ")");
  int32_t max_tokens = spec.max_tokens;
  if (max_tokens == 0) max_tokens = std::min(cfg_.default_max_tokens, cfg_.n_ctx - n_prompt);
  if (cfg_.n_ctx > 0 && (max_tokens <= 0 || static_cast<int64_t>(n_prompt) + max_tokens > cfg_.n_ctx))
    return reject(errc::context_length, "prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                                             std::to_string(std::max(max_tokens, 0)) + ") exceeds the model's context of " +
                                             std::to_string(cfg_.n_ctx) + " tokens; shorten the prompt or lower max_tokens");

  // Load.
  if (static_cast<int32_t>(pending_.size()) >= cfg_.max_pending) {
    ++st_.overloaded;
    const double per = completion_interval_ms_ > 0 ? completion_interval_ms_ : 1000.0;
    const double backlog = static_cast<double>(pending_.size()) - cfg_.max_pending + 1;
    const auto retry = static_cast<int64_t>(std::clamp(per * backlog, 100.0, 60000.0));
    return reject(errc::overloaded,
                  "the server has " + std::to_string(pending_.size()) + " requests in progress (its limit); retry later",
                  retry);
  }
  const std::string tenant_name = spec.tenant.empty() ? "default" : spec.tenant;
  if (cfg_.max_pending_per_tenant > 0) {
    // One tenant's streams (many clients that never read, say) must not take every slot.
    int32_t mine = 0;
    for (const auto& [id, a] : pending_) mine += a.tenant == tenant_name ? 1 : 0;
    if (mine >= cfg_.max_pending_per_tenant) {
      ++st_.overloaded;
      return reject(errc::rate_limited,
                    "tenant '" + tenant_name + "' has " + std::to_string(mine) +
                        " requests in progress, its limit (admission.max_pending_per_tenant); retry when one ends",
                    1000);
    }
  }
  if (!policy_ && !gate_) return reject(errc::internal, "admission has no usable policy: " + policy_error_);
  admission_ask ask;
  ask.id = next_id_;
  ask.tenant = tenant_name;
  ask.prompt_tokens = n_prompt;
  ask.max_tokens = max_tokens;
  ask.cost = static_cast<double>(n_prompt) + max_tokens;
  ask.priority = spec.priority;
  ask.pending = static_cast<int32_t>(pending_.size());
  ask.now_us = now_us;
  if (!gate_) {
    auto verdict = policy_->admit(ask);
    if (!verdict.ok) return refuse(std::move(verdict));
  }

  admission_decision d;
  d.ok = true;
  auto& r = d.request;
  r.id = next_id_++;
  r.model = cfg_.model_name;
  r.prompt = std::move(prompt);
  r.sampling = spec.sampling;
  r.max_tokens = max_tokens;
  r.stop = spec.stop;
  if (!spec.ignore_eos) r.eog = codec_->eog_tokens();
  r.logprobs = spec.logprobs || spec.sampling.n_logprobs > 0;
  r.priority = spec.priority;
  r.tenant = tenant_name;
  r.arrival_us = now_us;
  const int64_t deadline_ms = spec.deadline_ms > 0 ? spec.deadline_ms : cfg_.default_deadline_ms;
  r.deadline_us = deadline_ms > 0 ? now_us + deadline_ms * 1000 : 0;
  r.cache = spec.cache;
  r.constraint = std::move(constraint);
  r.speculative = spec.speculative;
  if (spec.prompt_tokens.empty()) {
    if (messages.empty()) {
      r.prompt_text = spec.prompt;
    } else {
      r.messages = std::move(messages);
    }
  }
  d.open.id = r.id;
  d.open.arrival_us = now_us;
  d.open.prompt_tokens = n_prompt;
  d.open.stop = spec.stop;
  d.open.tenant = tenant_name;
  if (offers_tools(spec)) {  // a reply that may call: the streamer ends it at a repeated call
    const auto [open, close] = structured::call_markers(codec_->tool_format());
    d.open.call_open = std::string(open);
    d.open.call_close = std::string(close);
  }
  pending_[r.id] = admitted{now_us, tenant_name, n_prompt, max_tokens};
  if (gate_) {  // held (and counted as pending) until the admission actor answers
    d.ok = false;
    d.ask = true;
    d.gate_ask = std::move(ask);
    return d;
  }
  ++st_.admitted;
  return d;
}

admission_decision admission_state::refuse(admission_verdict verdict) {
  // A refusal with a time to retry is a limit that refills; one without can never pass.
  if (verdict.code == errc::rate_limited && verdict.retry_after_ms > 0) ++st_.rate_limited;
  return reject(verdict.code.empty() ? std::string(errc::rate_limited) : verdict.code, std::move(verdict.message),
                verdict.retry_after_ms);
}

admission_decision admission_state::answer(admission_decision held, admission_verdict verdict) {
  const uint64_t id = held.request.id;
  if (!held.ask || !pending_.count(id)) return reject(errc::internal, "admission lost track of request " + std::to_string(id));
  if (!verdict.ok) {
    pending_.erase(id);
    return refuse(std::move(verdict));
  }
  held.ok = true;
  held.ask = false;
  ++st_.admitted;
  return held;
}

std::optional<admission_usage> admission_state::on_closed(uint64_t id, int64_t now_us, int32_t completion_tokens,
                                                        const std::string& finish_reason) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  std::optional<admission_usage> out;
  if (policy_ || gate_) {
    admission_usage u;
    u.id = id;
    u.tenant = std::move(it->second.tenant);
    u.prompt_tokens = it->second.prompt_tokens;
    u.completion_tokens = completion_tokens;
    u.max_tokens = it->second.max_tokens;
    u.finish_reason = finish_reason;
    u.admitted_us = it->second.at_us;
    u.now_us = now_us;
    if (gate_) out = std::move(u);
    else policy_->on_closed(u);
  }
  pending_.erase(it);
  if (last_completion_us_ > 0) {
    const double dt = static_cast<double>(now_us - last_completion_us_) / 1000.0;
    completion_interval_ms_ = completion_interval_ms_ > 0 ? 0.9 * completion_interval_ms_ + 0.1 * dt : dt;
  }
  last_completion_us_ = now_us;
  return out;
}

admission_stats admission_state::stats() const {
  auto s = st_;
  s.pending = static_cast<int32_t>(pending_.size());
  return s;
}

}  // namespace troupe::actors

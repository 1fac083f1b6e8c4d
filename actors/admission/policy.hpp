#pragma once
// Admission policies: who gets in, once a request is valid and the system has room. Admission
// (admission_state) checks the request against the model and the caps and the queue depth,
// then asks its policy; it tells the policy again when the request's stream closes, with the
// tokens it used. A policy keeps its own state (buckets, quotas) and never sees an actor.
//
// Registered by name (a duplicate name is an error; an unknown one lists the known ones), chosen
// by admission_config::policy with its options. Built in:
//   "token_bucket"  per-tenant token buckets on requests/s and tokens/s (tenant_limits below)
// On a hot reload with the same policy and options, the policy takes the new limits in place
// (reconfigure) and keeps its state; otherwise a new policy is made, and requests admitted under
// the old one close under the new one.
//
// The three values a policy is asked and told (admission_ask, admission_verdict,
// admission_usage) are also the messages of admission actors (gate.hpp): each carries its
// `inspect` here, next to its fields.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <caf/meta/type_name.hpp>

#include "actors/scheduler/speculative/proposer.hpp"
#include "common/named_registry.hpp"
#include "common/options.hpp"
#include "common/result.hpp"

namespace troupe::actors {

// Limits of one tenant; 0 means unlimited.
struct tenant_limits {
  double requests_per_s = 0;   // sustained requests per second
  double request_burst = 0;    // bucket size in requests (0: max(1, requests_per_s))
  double tokens_per_s = 0;     // sustained prompt + max_tokens per second
  double token_burst = 0;      // bucket size in tokens (0: max(tokens_per_s, the largest request))
};

struct admission_config {
  std::string model_name = "default";  // requests naming another model are refused
  int32_t n_ctx = 0;                   // the model's context (set by the pipeline)
  int32_t n_vocab = 0;                 // for checking pre-tokenized prompts (set by the pipeline)
  int32_t max_tokens_cap = 4096;       // largest max_tokens a request may ask for
  int32_t default_max_tokens = 256;    // when a request does not say (cut to fit the context)
  int32_t max_pending = 256;           // admitted requests not finished yet (queued or running)
  int32_t max_pending_per_tenant = 0;  // of those, one tenant's at most (0: no limit of its own)
  int32_t max_stop_strings = 4;        // as OpenAI allows; the request parser refuses more
  int32_t max_prompt_tokens = 0;       // longest prompt accepted, in tokens; 0: up to the model's context
  int64_t default_deadline_ms = 0;     // when a request does not say; 0: none
  std::string policy = "token_bucket"; // a name in admission_policy_registry()
  option_map policy_options;           // that policy's options (token_bucket has none)
  tenant_limits default_tenant;        // for tenants not listed below (token_bucket)
  std::map<std::string, tenant_limits> tenants;
  // The scheduler's [speculative] section, for checking a request's `speculative` method here,
  // before the response cache can answer it (a request must not be valid only on a cache hit).
  // Set by the pipeline; unset, only the method's name is checked.
  std::optional<speculative_config> speculative;
};

// A valid request, as its policy sees it.
struct admission_ask {
  uint64_t id = 0;              // the id it gets if admitted
  std::string tenant;           // "default" when the request named none
  int32_t prompt_tokens = 0;
  int32_t max_tokens = 0;       // after admission's default
  double cost = 0;              // prompt_tokens + max_tokens: the most it can use
  int32_t priority = 0;
  int32_t pending = 0;          // requests admitted and not finished, this one not counted
  int64_t now_us = 0;           // steady clock
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_ask& x) {
  return f(caf::meta::type_name("admission_ask"), x.id, x.tenant, x.prompt_tokens, x.max_tokens, x.cost, x.priority,
           x.pending, x.now_us);
}

struct admission_verdict {
  bool ok = true;
  std::string code;             // an errc code when refused (usually errc::rate_limited)
  std::string message;          // for a person: what is over which limit, and what to do
  int64_t retry_after_ms = 0;   // 0: no hint
  static admission_verdict admit() { return {}; }
  static admission_verdict refuse(std::string code, std::string message, int64_t retry_after_ms = 0) {
    return {false, std::move(code), std::move(message), retry_after_ms};
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_verdict& x) {
  return f(caf::meta::type_name("admission_verdict"), x.ok, x.code, x.message, x.retry_after_ms);
}

// A request whose stream closed, with what it used.
struct admission_usage {
  uint64_t id = 0;
  std::string tenant;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // tokens generated, including any a filter or a failure cut off
  int32_t max_tokens = 0;
  std::string finish_reason;      // empty when the request failed
  int64_t admitted_us = 0;
  int64_t now_us = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_usage& x) {
  return f(caf::meta::type_name("admission_usage"), x.id, x.tenant, x.prompt_tokens, x.completion_tokens, x.max_tokens,
           x.finish_reason, x.admitted_us, x.now_us);
}

class admission_policy {
 public:
  virtual ~admission_policy() = default;
  virtual std::string name() const = 0;
  // Whether the request may enter now. A yes is final: the request is admitted.
  virtual admission_verdict admit(const admission_ask& a) = 0;
  // Every admitted request closes once, also those admitted under a policy this one replaced.
  virtual void on_closed(const admission_usage&) {}
  // Hot reload with the same name and options: take `cfg`'s limits and keep the state; false
  // (the default) makes admission build a fresh policy instead.
  virtual bool reconfigure(const admission_config& /*cfg*/) { return false; }
};

// Makes a policy from the admission config (its policy_options and, if it uses them, the tenant
// limits); the error names the policy and the option at fault.
using admission_policy_factory = std::function<result<std::unique_ptr<admission_policy>>(const admission_config&)>;

// The process-wide registry, holding "token_bucket" from its first use.
named_registry<admission_policy_factory>& admission_policy_registry();

// Makes `cfg.policy` from `registry`.
result<std::unique_ptr<admission_policy>> make_admission_policy(
    const admission_config& cfg, const named_registry<admission_policy_factory>& registry = admission_policy_registry());

}  // namespace troupe::actors

#pragma once
// Admission's decisions, without CAF: validation of a request against the model (context
// length, vocabulary, known model name) and the configured caps, a cap on requests in the
// system (reject `overloaded` with a retry-after hint), then its admission policy (by name:
// per-tenant token buckets by default, see policy.hpp), and the request's deadline.
// Accepted requests get an id and go on tokenized.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "actors/admission/admission.hpp"
#include "actors/admission/policy.hpp"
#include "actors/request.hpp"
#include "actors/streamer/streamer.hpp"
#include "actors/text_codec.hpp"

namespace troupe::actors {

// tenant_limits and admission_config live in policy.hpp (policies read them).

struct admission_decision {
  bool ok = false;
  admitted_request request;  // when ok (or ask)
  stream_open open;          // when ok (or ask): what the streamer needs
  error_event error;         // when neither
  // The policy is an admission actor (gate.hpp): ask it `gate_ask`, then pass its
  // verdict to answer(). The request counts as pending meanwhile.
  bool ask = false;
  admission_ask gate_ask;
};

class admission_state {
 public:
  // The policy is made from `cfg` (admission_policy_registry()) unless one is given. When it
  // cannot be made, every request is refused with the reason (the pipeline checks first).
  admission_state(admission_config cfg, std::shared_ptr<const text_codec> codec,
                  std::unique_ptr<admission_policy> policy = nullptr);

  admission_decision admit(const request_spec& spec, int64_t now_us);
  // The admission actor's verdict on a decision admit() held (`ask`): the decision, admitted or
  // refused with the actor's reason.
  admission_decision answer(admission_decision held, admission_verdict verdict);
  // A request left the system (its stream closed) after generating `completion_tokens`;
  // `finish_reason` is empty when it failed. Under an admission actor, answers what to tell it.
  std::optional<admission_usage> on_closed(uint64_t id, int64_t now_us, int32_t completion_tokens = 0,
                                           const std::string& finish_reason = {});
  // Whether the policy is an admission actor (gate.hpp), run by the admission actor.
  bool uses_actor() const { return gate_; }

  admission_stats stats() const;
  const admission_config& config() const { return cfg_; }
  const admission_policy* policy() const { return policy_.get(); }
  // Hot reload: new limits for the same requests in flight and id sequence. The policy keeps its
  // state when its name and options are unchanged; otherwise a new one is made. On an error
  // (the new policy cannot be made) the running policy stays, under its old name.
  status reconfigure(admission_config cfg);

 private:
  struct admitted {
    int64_t at_us = 0;
    std::string tenant;
    int32_t prompt_tokens = 0;
    int32_t max_tokens = 0;
  };
  admission_decision reject(const std::string& code, std::string message, int64_t retry_after_ms = 0);
  admission_decision refuse(admission_verdict verdict);
  status check_speculative(const std::string& method) const;

  admission_config cfg_;
  std::shared_ptr<const text_codec> codec_;
  std::unique_ptr<admission_policy> policy_;
  std::string policy_error_;                        // why there is no policy
  bool gate_ = false;                               // cfg_.policy names an admission actor
  std::unordered_map<uint64_t, admitted> pending_;  // requests in the system
  uint64_t next_id_ = 1;
  double completion_interval_ms_ = 0;   // moving average of the time between completions
  int64_t last_completion_us_ = 0;
  admission_stats st_;
};

}  // namespace troupe::actors

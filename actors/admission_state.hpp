#pragma once
// Admission's decisions, without CAF: validation of a request against the model (context
// length, vocabulary, known model name) and the configured caps, a cap on requests in the
// system (reject `overloaded` with a retry-after hint), per-tenant token buckets (requests/s
// and tokens/s), and the request's deadline. Accepted requests get an id and go on tokenized.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <caf/meta/type_name.hpp>

#include "actors/request.hpp"
#include "actors/streamer_state.hpp"
#include "actors/text_codec.hpp"

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
  int32_t max_stop_strings = 8;
  int64_t default_deadline_ms = 0;     // when a request does not say; 0: none
  tenant_limits default_tenant;        // for tenants not listed below
  std::map<std::string, tenant_limits> tenants;
};

struct admission_stats {
  int64_t admitted = 0;
  int64_t rejected = 0;
  int64_t overloaded = 0;
  int64_t rate_limited = 0;
  int32_t pending = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_stats& x) {
  return f(caf::meta::type_name("admission_stats"), x.admitted, x.rejected, x.overloaded, x.rate_limited, x.pending);
}

struct admission_decision {
  bool ok = false;
  admitted_request request;  // when ok
  stream_open open;          // when ok: what the streamer needs
  error_event error;         // when not
};

class admission_state {
 public:
  admission_state(admission_config cfg, std::shared_ptr<const text_codec> codec);

  admission_decision admit(const request_spec& spec, int64_t now_us);
  // A request left the system (its stream closed).
  void on_closed(uint64_t id, int64_t now_us);

  admission_stats stats() const;
  const admission_config& config() const { return cfg_; }
  // Hot reload: new limits for the same requests in flight, tenant buckets and id sequence.
  void reconfigure(admission_config cfg) { cfg_ = std::move(cfg); }

 private:
  struct bucket {
    double level = 0;
    int64_t updated_us = 0;
    bool primed = false;
  };
  struct tenant {
    bucket requests, tokens;
  };
  admission_decision reject(const std::string& code, std::string message, int64_t retry_after_ms = 0);
  const tenant_limits& limits_of(const std::string& tenant) const;
  // Refills, then takes `cost` if there is enough; otherwise the wait in ms until there is.
  static int64_t take(bucket& b, double rate, double burst, double cost, int64_t now_us);

  admission_config cfg_;
  std::shared_ptr<const text_codec> codec_;
  std::unordered_map<std::string, tenant> tenants_;
  std::unordered_map<uint64_t, int64_t> pending_;  // id -> admitted at
  uint64_t next_id_ = 1;
  double completion_interval_ms_ = 0;   // moving average of the time between completions
  int64_t last_completion_us_ = 0;
  admission_stats st_;
};

}  // namespace troupe::actors

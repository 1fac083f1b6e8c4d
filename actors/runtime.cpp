#include "actors/runtime.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/admission/admission.hpp"
#include "actors/openssl_error_queue.hpp"
#include "actors/response_cache/response_cache.hpp"
#include "actors/executor/executor.hpp"
#include "actors/router/replica_door.hpp"
#include "actors/router/router.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/streamer/streamer.hpp"

namespace troupe::actors {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<model::sampling_params>("troupe.sampling_params");
  cfg.add_message_type<model::token_logprob>("troupe.token_logprob");
  cfg.add_message_type<chat_message>("troupe.chat_message");
  cfg.add_message_type<request_spec>("troupe.request_spec");
  cfg.add_message_type<usage_info>("troupe.usage_info");
  cfg.add_message_type<timing_info>("troupe.timing_info");
  cfg.add_message_type<token_event>("troupe.token_event");
  cfg.add_message_type<done_event>("troupe.done_event");
  cfg.add_message_type<error_event>("troupe.error_event");
  cfg.add_message_type<admitted_request>("troupe.admitted_request");
  cfg.add_message_type<step_entry>("troupe.step_entry");
  cfg.add_message_type<step_plan>("troupe.step_plan");
  cfg.add_message_type<sampled_token>("troupe.sampled_token");
  cfg.add_message_type<step_result>("troupe.step_result");
  cfg.add_message_type<token_out>("troupe.token_out");
  cfg.add_message_type<seq_finished>("troupe.seq_finished");
  cfg.add_message_type<seq_failed>("troupe.seq_failed");
  cfg.add_message_type<step_output>("troupe.step_output");
  cfg.add_message_type<stream_open>("troupe.stream_open");
  cfg.add_message_type<cache_replay>("troupe.cache_replay");
  cfg.add_message_type<closed_stream>("troupe.closed_stream");
  cfg.add_message_type<executor_info>("troupe.executor_info");
  cfg.add_message_type<scheduler_stats>("troupe.scheduler_stats");
  cfg.add_message_type<streamer_stats>("troupe.streamer_stats");
  cfg.add_message_type<admission_stats>("troupe.admission_stats");
  cfg.add_message_type<response_cache_stats>("troupe.response_cache_stats");
  cfg.add_message_type<submit_reply>("troupe.submit_reply");
  cfg.add_message_type<pipeline_links>("troupe.pipeline_links");
  cfg.add_message_type<event_sink>("troupe.event_sink");
  cfg.add_message_type<routing_options>("troupe.routing_options");
  cfg.add_message_type<router_config>("troupe.router_config");
  cfg.add_message_type<load_report>("troupe.load_report");
  cfg.add_message_type<replica_hello>("troupe.replica_hello");
  cfg.add_message_type<replica_welcome>("troupe.replica_welcome");
  cfg.add_message_type<replica_stats>("troupe.replica_stats");
  cfg.add_message_type<router_stats>("troupe.router_stats");
  cfg.add_message_type<door_status>("troupe.door_status");
  cfg.add_message_type<router_actor>("troupe.router_actor");
}

runtime::runtime(runtime_options o) {
  add_message_types(cfg_);
  const int threads = o.scheduler_threads > 0 ? o.scheduler_threads : 2;
  cfg_.set("scheduler.max-threads", threads);
  // CAF's idle workers poll their queues in three stages: 100 tight polls, then 500 polls with a
  // 50 us sleep between them, then a condition variable (woken by the next message sent to the
  // worker). The middle stage wakes each idle worker every 50 us for 25 ms after every message:
  // on a 2-core machine those wake-ups preempt the backend's two compute threads mid-step, and a
  // preempted thread holds the other at the step's next barrier. Skipping that stage made batch-1
  // decode through the pipeline ~30% faster (chat prompt, 128 tokens, fast order, 6 alternating
  // runs each on an AMD EPYC with 2 vCPUs: 165-218, median ~180 tokens/s with the default, 215-249,
  // median ~233 without it; per 1-token step 4.6-6.0 ms against 3.9-4.7 ms). A message to a
  // sleeping worker still wakes it at once (CAF notifies the condition variable on enqueue);
  // what changes is stealing: a job queued behind a busy worker waits for it (or for the idle
  // one's next wake, every 10 ms) where it was taken within 50 us. A 1 ms nap instead kept only
  // half the gain (5 alternating runs each: median 161 tokens/s with 50 us naps, 188 with 200 us,
  // 202 with 1 ms, 218 without the stage).
  cfg_.set("work-stealing.moderate-poll-attempts", 0);
  if (o.network) {
    cfg_.load<caf::io::middleman>();
    cfg_.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(o.heartbeat_ms)});
    cfg_.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(o.connection_timeout_ms)});
    if (o.tls()) {
      // CAF's TLS sessions need each thread's OpenSSL error queue cleared before every call
      // (actors/openssl_error_queue.hpp); without it one peer's end breaks the others' links.
      if (!openssl_error_queue_guarded())
        spdlog::warn("troupe: the OpenSSL error-queue guard is not in effect: one cluster peer's death may close "
                     "the TLS links of others (actors/openssl_error_queue.hpp)");
      cfg_.load<caf::openssl::manager>();
      cfg_.openssl_certificate = o.tls_certificate;
      cfg_.openssl_key = o.tls_key;
      cfg_.openssl_cafile = o.tls_ca;
    }
  }
  sys_ = std::make_unique<caf::actor_system>(cfg_);
}

runtime::~runtime() { sys_.reset(); }

}  // namespace troupe::actors

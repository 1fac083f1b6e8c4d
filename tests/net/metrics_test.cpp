// net/metrics: Prometheus text, and what one request records.
#include <gtest/gtest.h>

#include <chrono>

#include "net/metrics.hpp"

using namespace troupe;
using namespace troupe::net;

TEST(metrics, renders_prometheus_text) {
  metrics m;
  m.count_request("chat_completions", "200");
  m.add_tokens(3);
  m.ttft.observe(0.02);
  const auto s = m.render("");
  EXPECT_NE(s.find("troupe_requests_total{endpoint=\"chat_completions\",status=\"200\"} 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_generated_tokens_total 3"), std::string::npos);
  EXPECT_NE(s.find("troupe_time_to_first_token_seconds_bucket{le=\"0.025\"} 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_time_to_first_token_seconds_count 1"), std::string::npos);
}

// One recorder for HTTP and WebSocket: tokens and the gaps between them, then at the end the
// time to first token, the latency, the prompt tokens and a response-cache hit.
TEST(metrics, request_recorder_records_tokens_and_the_end) {
  metrics m;
  request_recorder r(m);
  const auto t0 = std::chrono::steady_clock::now();
  r.record(actors::token_event{1, 0, 5, "a"}, t0);
  r.record(actors::token_event{1, 1, 6, "b"}, t0 + std::chrono::milliseconds(20));
  actors::done_event d;
  d.finish_reason = "stop";
  d.usage = {7, 2, 3};
  d.timings.ttft_ms = 30;
  d.timings.total_ms = 60;
  d.cached = true;
  r.record(d, t0 + std::chrono::milliseconds(30));
  r.record(actors::error_event{1, "internal", "x", 0}, t0);  // adds nothing
  const auto s = m.render("");
  EXPECT_NE(s.find("troupe_generated_tokens_total 2"), std::string::npos);
  EXPECT_NE(s.find("troupe_inter_token_latency_seconds_count 1"), std::string::npos) << "one gap between two tokens";
  EXPECT_NE(s.find("troupe_inter_token_latency_seconds_bucket{le=\"0.025\"} 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_e2e_request_latency_seconds_count 1"), std::string::npos);
  EXPECT_NE(s.find("troupe_prompt_tokens_total 7"), std::string::npos);
  EXPECT_NE(s.find("troupe_prefix_cache_hit_tokens_total 3"), std::string::npos);
  EXPECT_NE(s.find("troupe_cache_hits_total 1"), std::string::npos);
}

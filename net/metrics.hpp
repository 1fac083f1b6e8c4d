#pragma once
// Server metrics in Prometheus text format. Lock-free counters and fixed-bucket histograms,
// updated from I/O threads; rendered on GET /metrics.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <map>
#include <string>

#include "actors/request.hpp"

namespace troupe::net {

class histogram {
 public:
  static constexpr std::array<double, 14> bounds = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                                    0.5,   0.75, 1.0,   2.5,  5.0,   10.0, 30.0};
  void observe(double seconds);
  void render(std::string& out, const char* name, const char* help) const;

 private:
  std::array<std::atomic<uint64_t>, bounds.size() + 1> buckets_{};  // last: +Inf
  std::atomic<uint64_t> sum_us_{0};
  std::atomic<uint64_t> count_{0};
};

class metrics {
 public:
  // One finished HTTP request or WebSocket generate, by endpoint and outcome
  // (HTTP status, or the finish reason / error code for streams).
  void count_request(const std::string& endpoint, const std::string& status);
  void add_tokens(uint64_t n) { tokens_.fetch_add(n, std::memory_order_relaxed); }
  void add_cache_hit() { cache_hits_.fetch_add(1, std::memory_order_relaxed); }
  void add_prompt_tokens(uint64_t n, uint64_t cached) {
    prompt_tokens_.fetch_add(n, std::memory_order_relaxed);
    prefix_hit_tokens_.fetch_add(cached, std::memory_order_relaxed);
  }
  void connection_opened(bool ws) { (ws ? ws_open_ : http_open_).fetch_add(1, std::memory_order_relaxed); }
  void connection_closed(bool ws) { (ws ? ws_open_ : http_open_).fetch_sub(1, std::memory_order_relaxed); }

  histogram ttft;
  histogram inter_token;
  histogram e2e;

  std::string render(const std::string& extra) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;
  std::atomic<uint64_t> tokens_{0};
  std::atomic<uint64_t> cache_hits_{0};
  std::atomic<uint64_t> prompt_tokens_{0};
  std::atomic<uint64_t> prefix_hit_tokens_{0};
  std::atomic<int64_t> ws_open_{0};
  std::atomic<int64_t> http_open_{0};
};

// What one request adds to the metrics as its events arrive, the same for HTTP and WebSocket:
// each token and the gap since the one before, then at its end the time to first token, the
// end-to-end latency, its prompt tokens and whether the response cache answered it. (Counting
// it in troupe_requests_total is the session's: HTTP counts a status, WebSocket the finish
// reason or error code.) One per request; not thread-safe, as a request's events come in order.
class request_recorder {
 public:
  explicit request_recorder(metrics& m) : m_(&m) {}
  void record(const actors::event& e, std::chrono::steady_clock::time_point now);

 private:
  metrics* m_;
  std::chrono::steady_clock::time_point last_token_{};
};

}  // namespace troupe::net

#include "net/metrics.hpp"

#include <cstdio>

namespace troupe::net {

void histogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  size_t i = 0;
  while (i < bounds.size() && seconds > bounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void histogram::render(std::string& out, const char* name, const char* help) const {
  char line[256];
  std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  out += line;
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cum += buckets_[i].load(std::memory_order_relaxed);
    std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], static_cast<unsigned long long>(cum));
    out += line;
  }
  cum += buckets_[bounds.size()].load(std::memory_order_relaxed);
  std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                static_cast<unsigned long long>(cum), name, static_cast<double>(sum_us_.load()) * 1e-6, name,
                static_cast<unsigned long long>(count_.load()));
  out += line;
}

void metrics::count_request(const std::string& endpoint, const std::string& status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void request_recorder::record(const actors::event& e, std::chrono::steady_clock::time_point now) {
  if (std::holds_alternative<actors::token_event>(e)) {
    m_->add_tokens(1);
    if (last_token_ != std::chrono::steady_clock::time_point{})
      m_->inter_token.observe(std::chrono::duration<double>(now - last_token_).count());
    last_token_ = now;
  } else if (auto* d = std::get_if<actors::done_event>(&e)) {
    m_->ttft.observe(d->timings.ttft_ms / 1000.0);
    m_->e2e.observe(d->timings.total_ms / 1000.0);
    m_->add_prompt_tokens(d->usage.prompt_tokens, d->usage.cached_prompt_tokens);
    if (d->cached) m_->add_cache_hit();
  }
}

std::string metrics::render(const std::string& extra) const {
  std::string out;
  out += "# HELP troupe_requests_total Finished requests by endpoint and status (HTTP status, finish reason or error code).\n";
  out += "# TYPE troupe_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, v] : requests_)
      out += "troupe_requests_total{endpoint=\"" + k.first + "\",status=\"" + k.second + "\"} " + std::to_string(v) + "\n";
  }
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
           std::to_string(v) + "\n";
  };
  counter("troupe_generated_tokens_total", "Tokens streamed to clients.", tokens_.load());
  counter("troupe_prompt_tokens_total",
          "Prompt tokens of finished sequences (a request of n choices counts its prompt n times; its usage once).",
          prompt_tokens_.load());
  counter("troupe_prefix_cache_hit_tokens_total", "Prompt tokens whose KV came from the prefix cache.",
          prefix_hit_tokens_.load());
  counter("troupe_cache_hits_total", "Requests answered from the response cache.", cache_hits_.load());
  gauge("troupe_open_websockets", "Open WebSocket connections.", ws_open_.load());
  gauge("troupe_open_http_connections", "Open HTTP connections.", http_open_.load());
  ttft.render(out, "troupe_time_to_first_token_seconds", "Admission to first token.");
  inter_token.render(out, "troupe_inter_token_latency_seconds", "Time between consecutive tokens of a stream.");
  e2e.render(out, "troupe_e2e_request_latency_seconds", "Admission to the end of the stream.");
  out += extra;
  return out;
}

}  // namespace troupe::net

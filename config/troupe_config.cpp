// The defaults of every section, copied from the structs the code reads: they are defined there
// and only there. Where serve_options and an actor's config disagree (max_num_seqs: 64 for
// `troupe serve`, 32 for a bare pipeline), the serve default wins: this is serve's config.
#include "config/troupe_config.hpp"

#include <chrono>

#include "actors/pipeline.hpp"
#include "actors/response_cache.hpp"
#include "cache/semantic_cache.hpp"
#include "model/backend.hpp"
#include "net/serve.hpp"

namespace troupe::config {

namespace {

const net::serve_options& serve_defaults() {
  static const net::serve_options o;
  return o;
}

const actors::pipeline_config& pipeline_defaults() {
  static const actors::pipeline_config c;
  return c;
}

const actors::response_cache_config& cache_defaults() {
  static const actors::response_cache_config c;
  return c;
}

}  // namespace

server_section::server_section() {
  const auto& s = serve_defaults().server;
  host = s.host;
  port = s.port;
  io_threads = s.io_threads;
  max_body_bytes = static_cast<int64_t>(s.max_body_bytes);
  max_ws_message_bytes = static_cast<int64_t>(s.max_ws_message_bytes);
  max_ws_queue_bytes = static_cast<int64_t>(s.max_ws_queue_bytes);
  ws_idle_timeout_s = s.ws_idle_timeout.count();
  http_read_timeout_s = s.http_read_timeout.count();
  shutdown_grace_s = s.shutdown_grace.count();
  resume_window_s = std::chrono::duration_cast<std::chrono::seconds>(s.resume_window).count();
  resume_keep_tokens = static_cast<int64_t>(s.resume_keep_tokens);
}

model_section::model_section() {
  const auto& s = serve_defaults();
  path = s.model;
  name = s.model_name;
  backend = s.backend;
  threads = s.backend_threads;
  cuda_graphs = model::backend_options{}.cuda_graphs;
  matmul = model::matmul_order_name(model::backend_options{}.matmul);
}

kv_section::kv_section() {
  const model::backend_options b;
  memory_mib = serve_defaults().kv_mb;
  block_size = b.block_size;
  f32 = b.kv_f32;
  q8 = b.kv_q8;
  prefix_caching = pipeline_defaults().scheduler.prefix_caching;
}

scheduler_section::scheduler_section() {
  const auto& s = pipeline_defaults().scheduler;
  policy = s.policy;
  policy_options = s.policy_opts.values;
  max_num_seqs = serve_defaults().max_num_seqs;
  max_batched_tokens = s.max_batched_tokens;
  max_steps_in_flight = s.max_steps_in_flight;
}

tenant_limits_section::tenant_limits_section() {
  const actors::tenant_limits t;
  requests_per_s = t.requests_per_s;
  request_burst = t.request_burst;
  tokens_per_s = t.tokens_per_s;
  token_burst = t.token_burst;
}

admission_section::admission_section() {
  const auto& a = pipeline_defaults().admission;
  policy = a.policy;
  policy_options = a.policy_options;
  max_pending = a.max_pending;
  max_prompt_tokens = 0;
  max_tokens_cap = a.max_tokens_cap;
  default_max_tokens = a.default_max_tokens;
  max_stop_strings = a.max_stop_strings;
  default_deadline_ms = a.default_deadline_ms;
}

cache_section::cache_section() {
  const auto& c = cache_defaults();
  const auto& s = c.semantic;
  enabled = c.enabled;
  policy = c.policy;
  exact_max_entries = static_cast<int64_t>(c.exact.max_entries);
  path = s.path;
  embedder = s.embedder;
  threshold = s.threshold;
  ttl_s = s.ttl_s;
  max_entries = static_cast<int64_t>(s.max_entries);
  max_bytes = static_cast<int64_t>(s.max_bytes);
  max_question_bytes = static_cast<int64_t>(s.max_question_bytes);
  semantic_for_truncated = s.semantic_for_truncated;
  lexical_guards = s.lexical_guards;
  sync_writes = s.sync_writes;
  embedder_model_dir = s.embedder_opts.model_dir;
  embedder_threads = s.embedder_opts.n_threads;
  embedder_max_tokens = s.embedder_opts.max_tokens;
  embedder_weights = s.embedder_opts.weights;
  embedder_dimension = s.embedder_opts.dimension;
  index_flat_limit = static_cast<int64_t>(s.index.flat_limit);
  index_hnsw_m = s.index.hnsw_m;
  index_ef_construction = s.index.ef_construction;
  index_ef_search = s.index.ef_search;
}

streamer_section::streamer_section() {
  const auto& s = pipeline_defaults().streamer;
  buffer_tokens = s.buffer_tokens;
  slow_consumer_timeout_ms = s.slow_consumer_timeout_ms;
}

logging_section::logging_section() : level("info") {}  // spdlog's own default

supervisor_section::supervisor_section() {
  const auto& p = pipeline_defaults();
  step_timeout_ms = p.step_timeout_ms;
  startup_timeout_ms = p.startup_timeout_ms;
  max_restarts = p.max_restarts;
  restart_window_ms = p.restart_window_ms;
}

}  // namespace troupe::config

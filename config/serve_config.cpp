#include "config/serve_config.hpp"

#include <chrono>

#include "actors/pipeline.hpp"
#include "actors/response_cache.hpp"
#include "model/backend.hpp"
#include "net/serve.hpp"

namespace troupe::config {

namespace {

actors::tenant_limits to_limits(const tenant_limits_section& s) {
  actors::tenant_limits l;
  l.requests_per_s = s.requests_per_s;
  l.request_burst = s.request_burst;
  l.tokens_per_s = s.tokens_per_s;
  l.token_burst = s.token_burst;
  return l;
}

}  // namespace

actors::response_cache_config to_response_cache_config(const troupe_config& c) {
  const auto& k = c.cache;
  actors::response_cache_config r;
  r.enabled = k.enabled;
  r.policy = k.policy;
  r.exact.enabled = k.enabled;
  r.exact.max_entries = static_cast<size_t>(k.exact_max_entries);
  auto& s = r.semantic;
  s.enabled = k.enabled;
  s.path = k.path;
  s.embedder = k.embedder;
  s.threshold = k.threshold;
  s.ttl_s = k.ttl_s;
  s.max_entries = static_cast<size_t>(k.max_entries);
  s.max_bytes = static_cast<size_t>(k.max_bytes);
  s.max_question_bytes = static_cast<size_t>(k.max_question_bytes);
  s.semantic_for_truncated = k.semantic_for_truncated;
  s.lexical_guards = k.lexical_guards;
  s.sync_writes = k.sync_writes;
  s.embedder_opts.model_dir = k.embedder_model_dir;
  s.embedder_opts.n_threads = static_cast<int>(k.embedder_threads);
  s.embedder_opts.max_tokens = static_cast<int>(k.embedder_max_tokens);
  s.embedder_opts.weights = k.embedder_weights;
  s.embedder_opts.dimension = static_cast<int>(k.embedder_dimension);
  s.index.flat_limit = static_cast<size_t>(k.index_flat_limit);
  s.index.hnsw_m = static_cast<int>(k.index_hnsw_m);
  s.index.ef_construction = static_cast<int>(k.index_ef_construction);
  s.index.ef_search = static_cast<int>(k.index_ef_search);
  return r;
}

void apply_to(const troupe_config& c, actors::pipeline_config& p) {
  auto& s = p.scheduler;
  s.policy = c.scheduler.policy;
  s.policy_opts.values = c.scheduler.policy_options;
  s.max_num_seqs = static_cast<int32_t>(c.scheduler.max_num_seqs);
  s.max_batched_tokens = static_cast<int32_t>(c.scheduler.max_batched_tokens);
  s.max_steps_in_flight = static_cast<int32_t>(c.scheduler.max_steps_in_flight);
  s.prefix_caching = c.kv.prefix_caching;

  auto& a = p.admission;
  a.policy = c.admission.policy;
  a.policy_options = c.admission.policy_options;
  a.max_pending = static_cast<int32_t>(c.admission.max_pending);
  a.max_tokens_cap = static_cast<int32_t>(c.admission.max_tokens_cap);
  a.default_max_tokens = static_cast<int32_t>(c.admission.default_max_tokens);
  a.max_stop_strings = static_cast<int32_t>(c.admission.max_stop_strings);
  a.default_deadline_ms = c.admission.default_deadline_ms;
  a.default_tenant = to_limits(c.admission.default_tenant);
  a.tenants.clear();
  for (const auto& [name, l] : c.admission.tenants) a.tenants[name] = to_limits(l);

  p.cache = to_response_cache_config(c);

  p.streamer.buffer_tokens = static_cast<int32_t>(c.streamer.buffer_tokens);
  p.streamer.slow_consumer_timeout_ms = c.streamer.slow_consumer_timeout_ms;
  p.streamer.filters.clear();
  for (const auto& f : c.streamer.filters) p.streamer.filters.push_back(actors::filter_spec{f.name, f.options});

  p.step_timeout_ms = c.supervisor.step_timeout_ms;
  p.startup_timeout_ms = c.supervisor.startup_timeout_ms;
  p.max_restarts = static_cast<int32_t>(c.supervisor.max_restarts);
  p.restart_window_ms = c.supervisor.restart_window_ms;
}

void apply_to(const troupe_config& c, model::backend_options& b) {
  b.n_threads = static_cast<int>(c.model.threads);
  b.block_size = static_cast<int32_t>(c.kv.block_size);
  b.kv_bytes = c.kv.memory_mib << 20;
  b.kv_f32 = c.kv.f32;
  b.kv_q8 = c.kv.q8;
  b.cuda_graphs = c.model.cuda_graphs;
  b.matmul = model::parse_matmul_order(c.model.matmul).value_or(model::matmul_order::llama_cpp);
}

net::serve_options to_serve_options(const troupe_config& c) {
  net::serve_options o;
  auto& s = o.server;
  s.host = c.server.host;
  s.port = static_cast<uint16_t>(c.server.port);
  s.io_threads = static_cast<int>(c.server.io_threads);
  s.api_keys.clear();
  s.api_key_tenants.clear();
  for (const auto& k : c.auth.api_keys) {
    s.api_keys.push_back(k.key);
    s.api_key_tenants.push_back(k.tenant);
  }
  s.admin_token = c.auth.admin_token;
  s.max_body_bytes = static_cast<size_t>(c.server.max_body_bytes);
  s.max_ws_message_bytes = static_cast<size_t>(c.server.max_ws_message_bytes);
  s.max_ws_queue_bytes = static_cast<size_t>(c.server.max_ws_queue_bytes);
  s.ws_idle_timeout = std::chrono::seconds(c.server.ws_idle_timeout_s);
  s.http_read_timeout = std::chrono::seconds(c.server.http_read_timeout_s);
  s.shutdown_grace = std::chrono::seconds(c.server.shutdown_grace_s);
  s.resume_window = std::chrono::seconds(c.server.resume_window_s);
  s.resume_keep_tokens = static_cast<size_t>(c.server.resume_keep_tokens);

  o.model = c.model.path;
  o.model_name = c.model.name;
  o.backend = c.model.backend;
  o.backend_threads = static_cast<int>(c.model.threads);
  o.kv_mb = c.kv.memory_mib;
  o.max_num_seqs = static_cast<int32_t>(c.scheduler.max_num_seqs);
  o.response_cache = c.cache.enabled;
  o.cache = to_response_cache_config(c);
  // Everything serve_options has no field for, applied to the structs serve builds.
  o.configure = [c](actors::pipeline_config& p, model::backend_options& b) {
    apply_to(c, p);
    apply_to(c, b);
  };
  return o;
}

std::vector<std::string> unread_settings(const troupe_config& c) {
  const troupe_config d;
  std::vector<std::string> out;
  if (c.admission.max_prompt_tokens != d.admission.max_prompt_tokens)
    out.push_back("admission.max_prompt_tokens: not enforced yet (admission checks the model's context only)");
  return out;
}

}  // namespace troupe::config

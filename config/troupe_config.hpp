#pragma once
// The whole configuration of `troupe serve` as plain values, one struct per section of the
// TOML file. config/reference.toml documents every key (unit, range, hot-swappable or not);
// the comments here say what each field feeds.
//
// The defaults are not written here: each section's constructor (troupe_config.cpp) copies
// them from the struct the code reads (net::serve_options, actors::scheduler_config, ...), so
// a default changes in one place. Keys that nothing reads yet are marked "(not read yet)" and
// default in troupe_config.cpp.
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace troupe::config {

// net::server_options. Durations in whole seconds.
struct server_section {
  std::string host;
  int64_t port = 0;                 // 0: any free port
  int64_t io_threads = 0;
  int64_t max_body_bytes = 0;
  int64_t max_ws_message_bytes = 0;
  int64_t max_ws_queue_bytes = 0;
  int64_t ws_idle_timeout_s = 0;
  int64_t http_read_timeout_s = 0;
  int64_t shutdown_grace_s = 0;
  int64_t resume_window_s = 0;
  int64_t resume_keep_tokens = 0;
  server_section();
};

// The model file and the backend that runs it (net::serve_options, model::backend_options).
struct model_section {
  std::string path;
  std::string name;                 // empty: the file name without .gguf
  std::string backend;              // a registered backend ("cpu", "cuda")
  int64_t threads = 0;              // engine threads; 0: all cores
  bool cuda_graphs = false;         // cuda: decode steps replayed as CUDA graphs
  std::string matmul;               // cpu: quantized matmul order, "llama.cpp" or "fast"
  model_section();
};

// KV memory (model::backend_options) and the block pool's prefix caching (scheduler_config).
struct kv_section {
  int64_t memory_mib = 0;
  int64_t block_size = 0;
  bool f32 = false;
  bool q8 = false;
  bool prefix_caching = false;
  kv_section();
};

// actors::scheduler_config.
struct scheduler_section {
  std::string policy;                            // a name in actors::policy_registry::global()
  std::map<std::string, double> policy_options;  // that policy's knobs
  int64_t max_num_seqs = 0;
  int64_t max_batched_tokens = 0;                // token budget per step (chunked prefill)
  int64_t max_steps_in_flight = 0;
  scheduler_section();
};

// actors::tenant_limits; 0 means unlimited.
struct tenant_limits_section {
  double requests_per_s = 0;
  double request_burst = 0;
  double tokens_per_s = 0;
  double token_burst = 0;
  tenant_limits_section();
};

// A value of an options table (output filters, the admission policy): what TOML values such a
// part may be given. The same type as actors::option_value.
using option_value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>>;

// actors::admission_config.
struct admission_section {
  std::string policy;                  // a name in actors::admission_policy_registry()
  std::map<std::string, option_value> policy_options;  // that policy's options
  int64_t max_pending = 0;             // queue depth: admitted requests not finished yet
  int64_t max_prompt_tokens = 0;       // (not read yet) 0: the model's context
  int64_t max_tokens_cap = 0;
  int64_t default_max_tokens = 0;
  int64_t max_stop_strings = 0;
  int64_t default_deadline_ms = 0;     // 0: none
  tenant_limits_section default_tenant;
  std::map<std::string, tenant_limits_section> tenants;
  admission_section();
};

// actors::response_cache_config: the policy and its `exact` / `semantic` settings
// (cache::semantic_cache_config, cache::embedder_options, cache::index_options).
struct cache_section {
  bool enabled = false;
  std::string policy;                  // a name in actors::response_cache_registry()
  int64_t exact_max_entries = 0;       // policy "exact"
  std::string path;
  std::string embedder;                // a name in cache::embedder_registry::global()
  float threshold = 0;
  int64_t ttl_s = 0;
  int64_t max_entries = 0;
  int64_t max_bytes = 0;
  int64_t max_question_bytes = 0;
  bool semantic_for_truncated = false;
  bool lexical_guards = false;
  bool sync_writes = false;
  // [cache.embedder_options]
  std::string embedder_model_dir;
  int64_t embedder_threads = 0;
  int64_t embedder_max_tokens = 0;
  std::string embedder_weights;
  int64_t embedder_dimension = 0;
  // [cache.index]
  int64_t index_flat_limit = 0;
  int64_t index_hnsw_m = 0;
  int64_t index_ef_construction = 0;
  int64_t index_ef_search = 0;
  cache_section();
};

// One output filter of the streamer, by name in actors::stream_filter_registry(), with its options.
struct filter_spec {
  std::string name;
  std::map<std::string, option_value> options;
  bool operator==(const filter_spec& o) const { return name == o.name && options == o.options; }
};

// actors::streamer_config, with its output filters.
struct streamer_section {
  int64_t buffer_tokens = 0;
  int64_t slow_consumer_timeout_ms = 0;
  std::vector<filter_spec> filters;    // applied in this order
  streamer_section();
};

struct api_key {
  std::string key;
  std::string tenant;                  // empty: "key<N>", N its index (what net/ does today)
  bool operator==(const api_key& o) const { return key == o.key && tenant == o.tenant; }
};

// net::server_options::api_keys, and the token of the admin endpoints (not read yet).
struct auth_section {
  std::vector<api_key> api_keys;       // empty: no authentication
  std::string admin_token;             // empty: admin endpoints are off
};

struct logging_section {
  std::string level;                   // spdlog's names: trace, debug, info, warn, error, critical, off
  logging_section();
};

// actors::pipeline_config: how the supervisor watches the actors.
struct supervisor_section {
  int64_t step_timeout_ms = 0;
  int64_t startup_timeout_ms = 0;
  int64_t max_restarts = 0;
  int64_t restart_window_ms = 0;
  supervisor_section();
};

struct troupe_config {
  server_section server;
  model_section model;
  kv_section kv;
  scheduler_section scheduler;
  admission_section admission;
  cache_section cache;
  streamer_section streamer;
  auth_section auth;
  logging_section logging;
  supervisor_section supervisor;
  std::vector<std::string> plugins;    // shared libraries loaded at startup (actors/plugin_loader)
};

}  // namespace troupe::config

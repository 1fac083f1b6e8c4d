// From a config to what `troupe serve` runs: serve_options, and through its configure hook the
// pipeline's and the backend's options.
#include "config/serve_config.hpp"

#include <gtest/gtest.h>

#include "actors/pipeline.hpp"
#include "config/config_loader.hpp"
#include "model/backend.hpp"
#include "net/serve.hpp"

namespace troupe::config {
namespace {

TEST(ServeConfig, DefaultsGiveServesOwnDefaults) {
  const net::serve_options want;
  const auto o = to_serve_options(troupe_config{});
  EXPECT_EQ(o.server.host, want.server.host);
  EXPECT_EQ(o.server.port, want.server.port);
  EXPECT_EQ(o.server.io_threads, want.server.io_threads);
  EXPECT_EQ(o.server.max_body_bytes, want.server.max_body_bytes);
  EXPECT_EQ(o.server.max_ws_message_bytes, want.server.max_ws_message_bytes);
  EXPECT_EQ(o.server.max_ws_queue_bytes, want.server.max_ws_queue_bytes);
  EXPECT_EQ(o.server.ws_idle_timeout, want.server.ws_idle_timeout);
  EXPECT_EQ(o.server.resume_window, want.server.resume_window);
  EXPECT_EQ(o.server.resume_keep_tokens, want.server.resume_keep_tokens);
  EXPECT_TRUE(o.server.api_keys.empty());
  EXPECT_EQ(o.model, want.model);
  EXPECT_EQ(o.model_name, want.model_name);
  EXPECT_EQ(o.backend, want.backend);
  EXPECT_EQ(o.backend_threads, want.backend_threads);
  EXPECT_EQ(o.kv_mb, want.kv_mb);
  EXPECT_EQ(o.max_num_seqs, want.max_num_seqs);
  EXPECT_EQ(o.response_cache, want.response_cache);

  // The hook leaves the pipeline's and backend's defaults as they were.
  actors::pipeline_config p, p0;
  model::backend_options b, b0;
  b.kv_bytes = b0.kv_bytes = int64_t{want.kv_mb} << 20;
  ASSERT_TRUE(o.configure);
  o.configure(p, b);
  EXPECT_EQ(p.scheduler.policy, p0.scheduler.policy);
  EXPECT_EQ(p.scheduler.max_batched_tokens, p0.scheduler.max_batched_tokens);
  EXPECT_EQ(p.admission.max_pending, p0.admission.max_pending);
  EXPECT_EQ(p.cache.policy, p0.cache.policy);
  EXPECT_EQ(p.cache.semantic.path, p0.cache.semantic.path);
  EXPECT_EQ(p.cache.semantic.threshold, p0.cache.semantic.threshold);
  EXPECT_EQ(p.streamer.buffer_tokens, p0.streamer.buffer_tokens);
  EXPECT_EQ(p.step_timeout_ms, p0.step_timeout_ms);
  EXPECT_EQ(b.block_size, b0.block_size);
  EXPECT_EQ(b.kv_bytes, b0.kv_bytes);
  EXPECT_EQ(b.kv_f32, b0.kv_f32);
  EXPECT_EQ(b.kv_q8, b0.kv_q8);
  EXPECT_EQ(b.cuda_graphs, b0.cuda_graphs);
}

TEST(ServeConfig, KvQ8ReachesTheBackendOptions) {
  auto c = parse_config("[kv]\nq8 = true\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  actors::pipeline_config p;
  model::backend_options b;
  to_serve_options(c.value()).configure(p, b);
  EXPECT_TRUE(b.kv_q8);
  EXPECT_FALSE(b.kv_f32);
}

TEST(ServeConfig, EverySectionReachesTheStructItConfigures) {
  auto c = parse_config(R"(
[server]
host = "0.0.0.0"
port = 9001
ws_idle_timeout_s = 10
resume_window_s = 5
[model]
path = "m.gguf"
name = "smol"
threads = 2
cuda_graphs = false
[kv]
memory_mib = 64
block_size = 32
f32 = true
prefix_caching = false
[scheduler]
policy = "sjf"
max_num_seqs = 7
max_batched_tokens = 128
[scheduler.policy_options]
aging_tokens_per_s = 3
[admission]
max_pending = 9
default_deadline_ms = 5000
[admission.tenants.alice]
tokens_per_s = 10
[cache]
policy = "exact"
exact_max_entries = 11
threshold = 0.8
ttl_s = 30
[cache.embedder_options]
weights = "q8_0"
[streamer]
buffer_tokens = 5
[[auth.api_keys]]
key = "k1"
tenant = "alice"
[supervisor]
max_restarts = 1
)",
                        "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  const auto o = to_serve_options(c.value());
  EXPECT_EQ(o.server.host, "0.0.0.0");
  EXPECT_EQ(o.server.port, 9001);
  EXPECT_EQ(o.server.ws_idle_timeout, std::chrono::seconds(10));
  EXPECT_EQ(o.server.resume_window, std::chrono::milliseconds(5000));
  EXPECT_EQ(o.server.api_keys, std::vector<std::string>{"k1"});
  EXPECT_EQ(o.model, "m.gguf");
  EXPECT_EQ(o.model_name, "smol");
  EXPECT_EQ(o.kv_mb, 64);
  EXPECT_EQ(o.max_num_seqs, 7);

  actors::pipeline_config p;
  model::backend_options b;
  o.configure(p, b);
  EXPECT_EQ(p.scheduler.policy, "sjf");
  EXPECT_EQ(p.scheduler.policy_opts.get("aging_tokens_per_s", 0), 3.0);
  EXPECT_EQ(p.scheduler.max_num_seqs, 7);
  EXPECT_EQ(p.scheduler.max_batched_tokens, 128);
  EXPECT_FALSE(p.scheduler.prefix_caching);
  EXPECT_EQ(p.admission.max_pending, 9);
  EXPECT_EQ(p.admission.default_deadline_ms, 5000);
  EXPECT_EQ(p.admission.tenants.at("alice").tokens_per_s, 10);
  EXPECT_EQ(p.cache.policy, "exact");
  EXPECT_EQ(p.cache.exact.max_entries, 11u);
  EXPECT_FLOAT_EQ(p.cache.semantic.threshold, 0.8f);
  EXPECT_EQ(p.cache.semantic.ttl_s, 30);
  EXPECT_EQ(p.cache.semantic.embedder_opts.weights, "q8_0");
  EXPECT_EQ(p.streamer.buffer_tokens, 5);
  EXPECT_EQ(p.max_restarts, 1);
  EXPECT_EQ(b.n_threads, 2);
  EXPECT_EQ(b.block_size, 32);
  EXPECT_EQ(b.kv_bytes, int64_t{64} << 20);
  EXPECT_TRUE(b.kv_f32);
  EXPECT_FALSE(b.cuda_graphs);
}

}  // namespace
}  // namespace troupe::config

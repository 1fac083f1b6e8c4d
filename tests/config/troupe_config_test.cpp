// From a config file to what `troupe serve` runs: each key lands in the field of the struct the
// code reads (server options, model and backend options, the pipeline's config), with the
// runtime structs' own defaults where the file says nothing.
#include "config/troupe_config.hpp"

#include <gtest/gtest.h>

#include "actors/supervisor/pipeline_config.hpp"
#include "config/config_loader.hpp"
#include "model/backend.hpp"

namespace troupe::config {
namespace {

TEST(TroupeConfig, DefaultsAreTheRuntimeStructsOwn) {
  const server_options want;
  const troupe_config o;
  EXPECT_EQ(o.server.host, want.host);
  EXPECT_EQ(o.server.port, want.port);
  EXPECT_EQ(o.server.io_threads, want.io_threads);
  EXPECT_EQ(o.server.max_body_bytes, want.max_body_bytes);
  EXPECT_EQ(o.server.max_ws_message_bytes, want.max_ws_message_bytes);
  EXPECT_EQ(o.server.max_ws_queue_bytes, want.max_ws_queue_bytes);
  EXPECT_EQ(o.server.ws_idle_timeout, want.ws_idle_timeout);
  EXPECT_EQ(o.server.resume_window, want.resume_window);
  EXPECT_EQ(o.server.resume_keep_tokens, want.resume_keep_tokens);
  EXPECT_TRUE(o.server.api_keys.empty());
  EXPECT_EQ(o.model.path, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(o.model.name, "");
  EXPECT_EQ(o.model.backend, "cpu");
  EXPECT_EQ(o.backend.n_threads, 0);
  EXPECT_EQ(o.backend.kv_bytes, int64_t{256} << 20);
  EXPECT_EQ(o.pipeline.scheduler.max_num_seqs, 64);  // serve's own, not the bare pipeline's 32
  EXPECT_TRUE(o.pipeline.cache.enabled);

  // The rest: the pipeline's and backend's defaults as they are.
  const actors::pipeline_config p0;
  const model::backend_options b0;
  const auto& p = o.pipeline;
  const auto& b = o.backend;
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

  // Read from an empty file: the same.
  auto empty = parse_config("", "t.toml");
  ASSERT_TRUE(empty.ok()) << empty.error();
  EXPECT_EQ(empty->pipeline.scheduler.max_num_seqs, 64);
  EXPECT_EQ(empty->backend.kv_bytes, b0.kv_bytes);
  EXPECT_EQ(empty->backend.matmul, b0.matmul);
}

TEST(TroupeConfig, KvQ8ReachesTheBackendOptions) {
  auto c = parse_config("[kv]\nq8 = true\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(c->backend.kv_q8);
  EXPECT_FALSE(c->backend.kv_f32);
}

TEST(TroupeConfig, EverySectionReachesTheStructItConfigures) {
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
  const auto& o = c.value();
  EXPECT_EQ(o.server.host, "0.0.0.0");
  EXPECT_EQ(o.server.port, 9001);
  EXPECT_EQ(o.server.ws_idle_timeout, std::chrono::seconds(10));
  EXPECT_EQ(o.server.resume_window, std::chrono::milliseconds(5000));
  EXPECT_EQ(o.server.api_keys, std::vector<std::string>{"k1"});
  EXPECT_EQ(o.server.tenant_of(0), "alice");
  EXPECT_EQ(o.model.path, "m.gguf");
  EXPECT_EQ(o.model.name, "smol");

  const auto& p = o.pipeline;
  const auto& b = o.backend;
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

TEST(TroupeConfig, CacheEnabledSwitchesTheCacheAndBothPolicies) {
  auto c = parse_config("[cache]\nenabled = false\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_FALSE(c->pipeline.cache.enabled);
  EXPECT_FALSE(c->pipeline.cache.exact.enabled);
  EXPECT_FALSE(c->pipeline.cache.semantic.enabled);
}

}  // namespace
}  // namespace troupe::config

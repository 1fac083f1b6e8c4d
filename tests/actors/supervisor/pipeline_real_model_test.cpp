// The whole pipeline on SmolLM2-135M: 32 concurrent greedy chat requests, with prefix caching
// (they share the chat template's system prompt) and a KV memory small enough to force
// preemptions. Each output must equal the same request run alone on a pipeline with one
// sequence at a time and no prefix caching: batching, prefix reuse and preemption must not
// change results.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "actors/client.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "model/llama_model.hpp"
#include "tests/support/changed_stages.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

namespace {

constexpr int n_requests = 32;
constexpr int32_t max_tokens = 16;

std::vector<request_spec> requests() {
  const char* topics[] = {"the moon", "bread", "rivers", "chess", "owls", "rain", "copper", "jazz"};
  const char* asks[] = {"Tell me one fact about", "Write a short sentence about", "What is", "Describe"};
  std::vector<request_spec> out;
  for (int i = 0; i < n_requests; ++i) {
    request_spec s;
    s.messages = {{"user", std::string(asks[i % 4]) + " " + topics[i % 8] + (i >= 16 ? ", briefly." : ".")}};
    s.max_tokens = max_tokens;
    out.push_back(s);
  }
  return out;
}

std::shared_ptr<model::llama_model> load() {
  static std::shared_ptr<model::llama_model> m = [] {
    auto r = model::llama_model::load(test::real_model_path());
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? r.value() : nullptr;
  }();
  return m;
}

// Each request alone: one sequence at a time, no prefix caching, no response cache. Stops at the
// first failure (the result is then shorter than `reqs`).
std::vector<completion> run_alone(runtime& rt, const std::shared_ptr<model::llama_model>& m,
                                  const std::vector<request_spec>& reqs) {
  std::vector<completion> alone;
  pipeline_config cfg;
  cfg.scheduler.max_num_seqs = 1;
  cfg.scheduler.prefix_caching = false;
  cfg.cache.enabled = false;
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 64ll << 20;
  auto p = pipeline::start(rt.system(), cfg, m, bo);
  EXPECT_TRUE(p.ok()) << p.error();
  if (!p.ok()) return alone;
  client c(**p);
  for (const auto& r : reqs) {
    auto out = c.submit(r)->wait(120s);
    EXPECT_TRUE(out.ok()) << out.error.message;
    if (!out.ok()) break;
    alone.push_back(out);
  }
  return alone;
}

}  // namespace

TEST(pipeline_real_model, concurrent_greedy_outputs_equal_running_alone) {
  if (!test::real_model_available()) GTEST_SKIP() << "real model not found at " << test::real_model_path();
  auto m = load();
  ASSERT_TRUE(m);
  runtime rt;
  const auto reqs = requests();

  const auto alone = run_alone(rt, m, reqs);
  ASSERT_EQ(alone.size(), reqs.size());

  // Together: all at once, prefix caching on, KV memory for about 600 tokens.
  pipeline_config cfg;
  cfg.scheduler.max_num_seqs = 32;
  cfg.scheduler.max_batched_tokens = 256;
  cfg.cache.enabled = false;
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = static_cast<int64_t>(600) * 30 * 2 * 192 * 2;  // SmolLM2-135M: 30 layers, 192 KV dims, fp16
  auto p = pipeline::start(rt.system(), cfg, m, bo);
  ASSERT_TRUE(p.ok()) << p.error();
  client c(**p);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<stream>> streams;
  for (const auto& r : reqs) streams.push_back(c.submit(r));
  for (int i = 0; i < n_requests; ++i) {
    auto out = streams[static_cast<size_t>(i)]->wait(300s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    const auto& ref = alone[static_cast<size_t>(i)];
    EXPECT_EQ(out.tokens, ref.tokens) << "request " << i << ": together \"" << out.text << "\" alone \"" << ref.text
                                      << "\"";
    EXPECT_EQ(out.text, ref.text);
    EXPECT_EQ(out.finish_reason, ref.finish_reason);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = (*p)->get_scheduler_stats();
  ASSERT_TRUE(st.ok());
  std::printf("32 concurrent requests: %.2f s, %lld steps, %lld preemptions, %lld of %lld prompt tokens from the prefix cache, "
              "KV blocks %d\n",
              secs, static_cast<long long>(st->steps), static_cast<long long>(st->preemptions),
              static_cast<long long>(st->prefix_hit_tokens), static_cast<long long>(st->prompt_tokens),
              st->kv_blocks_total);
  EXPECT_GT(st->prefix_hit_tokens, 0);
  EXPECT_GT(st->preemptions, 0) << "the KV budget was meant to force preemptions";
  EXPECT_EQ(st->kv_blocks_available, st->kv_blocks_total);
  EXPECT_FALSE(alone[0].text.empty());
  std::printf("sample: \"%s\"\n", alone[0].text.c_str());
}

// Issue 7's test of hot swaps: 64 greedy streams run while the scheduler policy goes
// fcfs -> priority -> sjf -> fcfs, one swap a second, for 20 seconds. Whenever a stream
// finishes during those 20 s another takes its place, so 64 are in flight at every swap however
// fast the machine is. Every stream must equal its isolated greedy run: the scheduler's state
// moves to each new actor without losing or repeating a token. 16 distinct questions, asked
// again and again with other priorities (so isolated runs cost 16).
TEST(pipeline_real_model, scheduler_swapped_every_second_under_64_streams) {
  if (!test::real_model_available()) GTEST_SKIP() << "real model not found at " << test::real_model_path();
  auto m = load();
  ASSERT_TRUE(m);
  runtime rt;
  const char* topics[] = {"the moon", "bread", "rivers", "chess", "owls", "rain", "copper", "jazz",
                          "glaciers", "bees", "clocks", "tea", "volcanoes", "paper", "wolves", "salt"};
  constexpr int32_t n_tokens = 48;
  constexpr int n_swaps = 20;
  std::vector<request_spec> distinct;
  for (const char* t : topics) {
    request_spec s;
    s.messages = {{"user", std::string("Tell me about ") + t + "."}};
    s.max_tokens = n_tokens;
    distinct.push_back(s);
  }
  const auto alone = run_alone(rt, m, distinct);
  ASSERT_EQ(alone.size(), distinct.size());

  pipeline_config cfg;
  cfg.scheduler.policy = "fcfs";
  cfg.scheduler.max_num_seqs = 32;
  cfg.cache.enabled = false;
  model::backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 64ll << 20;
  auto p = pipeline::start(rt.system(), cfg, m, bo);
  ASSERT_TRUE(p.ok()) << p.error();
  client c(**p);
  int submitted = 0;
  auto submit = [&](std::vector<std::unique_ptr<stream>>& live, std::vector<int>& which) {
    auto s = distinct[static_cast<size_t>(submitted % 16)];
    s.priority = (submitted / 16) % 4;
    which.push_back(submitted % 16);
    live.push_back(c.submit(s));
    ++submitted;
  };
  std::vector<std::unique_ptr<stream>> live;
  std::vector<int> which;
  for (int i = 0; i < 64; ++i) submit(live, which);

  const char* cycle[] = {"priority", "sjf", "fcfs"};
  std::atomic<bool> swapping{true};
  std::atomic<int> swaps{0};
  std::string swap_error;
  std::thread swapper([&] {
    auto next = cfg;
    for (int i = 0; i < n_swaps; ++i) {
      std::this_thread::sleep_for(1s);
      next.scheduler.policy = cycle[i % 3];
      auto r = (*p)->reconfigure(next, test::changed_stages((*p)->config(), next), 30s);
      if (!r.ok()) {
        swap_error = r.error();
        break;
      }
      ++swaps;
    }
    swapping = false;
  });
  const auto t0 = std::chrono::steady_clock::now();
  int completed = 0, equal = 0;
  auto check = [&](stream& s, int q) {
    auto out = s.wait(300s);
    EXPECT_TRUE(out.ok()) << out.error.message;
    const auto& ref = alone[static_cast<size_t>(q)];
    EXPECT_EQ(out.tokens, ref.tokens) << "question " << q << ": \"" << out.text << "\" alone \"" << ref.text << "\"";
    ++completed;
    equal += out.tokens == ref.tokens ? 1 : 0;
  };
  // While swapping: a finished stream is checked and replaced.
  while (swapping) {
    for (size_t i = 0; i < live.size(); ++i) {
      if (!live[i]->ended()) continue;
      check(*live[i], which[i]);
      auto s = distinct[static_cast<size_t>(submitted % 16)];
      s.priority = (submitted / 16) % 4;
      which[i] = submitted % 16;
      live[i] = c.submit(s);
      ++submitted;
    }
    std::this_thread::sleep_for(20ms);
  }
  swapper.join();
  for (size_t i = 0; i < live.size(); ++i) check(*live[i], which[i]);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(swap_error.empty()) << swap_error;
  std::printf("%d streams (64 at a time) in %.1f s with %d scheduler swaps, one a second; %d of %d equal to their "
              "isolated greedy runs\n",
              completed, secs, swaps.load(), equal, completed);
  EXPECT_EQ(swaps, n_swaps);
  EXPECT_EQ(equal, completed);
  EXPECT_EQ(completed, submitted);
  auto st = (*p)->get_scheduler_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->kv_blocks_available, st->kv_blocks_total);
}

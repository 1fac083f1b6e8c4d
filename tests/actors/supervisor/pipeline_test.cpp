// The actors through messages: the whole pipeline over the fake backend, driven by the
// in-process client. Admission, the cache, stop strings, cancellation under load, flow control
// and slow consumers, deadlines, and an executor that throws.
#include "actors/supervisor/pipeline.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <caf/all.hpp>

#include "actors/client.hpp"
#include "actors/runtime.hpp"
#include "tests/support/changed_stages.hpp"
#include "tests/support/fake_backend.hpp"
#include "tests/support/fake_pipeline.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;
using troupe::test::fake_backend;
using troupe::test::fake_options;
using troupe::test::fake_reference;

namespace {

pipeline_config small_config() {
  auto c = test::small_pipeline_config();
  c.scheduler.max_num_seqs = 16;
  c.admission.max_pending = 4096;
  c.cache.policy = "exact";  // in memory; the semantic policy has its own test below
  return c;
}

std::string text_of(const std::vector<int32_t>& t) {
  std::string s;
  for (auto x : t) s.push_back(static_cast<char>(x));
  return s;
}

std::vector<int32_t> bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

// Waits until the scheduler holds nothing, then returns its numbers.
scheduler_stats settle(const pipeline& p) {
  scheduler_stats s;
  for (int i = 0; i < 400; ++i) {
    auto r = p.get_scheduler_stats();
    if (r.ok()) {
      s = *r;
      if (s.running == 0 && s.waiting == 0 && s.steps_in_flight == 0) return s;
    }
    std::this_thread::sleep_for(10ms);
  }
  ADD_FAILURE() << "the scheduler did not settle: running " << s.running << " waiting " << s.waiting;
  return s;
}

}  // namespace

TEST(pipeline, one_request_end_to_end) {
  runtime rt;
  EXPECT_EQ(rt.system().scheduler().num_workers(), 2u);  // not CAF's default of max(cores, 4)
  fake_options fo;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->executor().backend, "fake");
  client c(*p);
  auto s = c.submit(test::prompt_spec("hello", 12));
  auto out = s->wait(10s);
  ASSERT_TRUE(out.ok()) << out.error.message;
  EXPECT_EQ(out.tokens, fake_reference(fo, bytes("hello"), 12));
  EXPECT_EQ(out.text, text_of(out.tokens));
  EXPECT_EQ(out.finish_reason, finish::length);
  EXPECT_EQ(out.usage.prompt_tokens, 5);
  EXPECT_EQ(out.usage.completion_tokens, 12);
  EXPECT_GT(out.timings.ttft_ms, 0);
  EXPECT_GE(out.timings.total_ms, out.timings.ttft_ms);
  EXPECT_FALSE(out.cached);
  EXPECT_GT(out.id, 0u);
}

TEST(pipeline, events_arrive_in_order_with_indices) {
  runtime rt;
  fake_options fo;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto s = c.submit(test::prompt_spec("abc", 8));
  int expect = 0;
  for (;;) {
    auto e = s->next(10s);
    ASSERT_TRUE(e);
    if (auto* t = std::get_if<token_event>(&*e)) {
      EXPECT_EQ(t->index, expect++);
      continue;
    }
    ASSERT_TRUE(std::holds_alternative<done_event>(*e));
    break;
  }
  EXPECT_EQ(expect, 8);
  EXPECT_FALSE(s->next(50ms));
}

TEST(pipeline, concurrent_requests_match_running_alone) {
  runtime rt;
  fake_options fo;
  fo.eog_every = 12;
  fo.n_blocks = 128;  // tight enough to preempt now and then
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> streams;
  std::vector<std::string> prompts;
  for (int i = 0; i < 32; ++i) {
    prompts.push_back("request number " + std::to_string(i) + std::string(static_cast<size_t>(i % 7) * 5, 'x'));
    streams.push_back(c.submit(test::prompt_spec(prompts.back(), 20 + i % 13)));
  }
  for (int i = 0; i < 32; ++i) {
    auto out = streams[static_cast<size_t>(i)]->wait(20s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    EXPECT_EQ(out.tokens, fake_reference(fo, bytes(prompts[static_cast<size_t>(i)]), 20 + i % 13)) << i;
  }
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
  size_t widest = 0;
  for (size_t k = 0; k < st.batch_hist.size(); ++k)
    if (st.batch_hist[k]) widest = k;
  EXPECT_GT(widest, 4u) << "requests were not batched together";
}

TEST(pipeline, rejections_are_error_events) {
  runtime rt;
  fake_options fo;
  fo.n_ctx = 64;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto out = c.submit(test::prompt_spec(std::string(60, 'a'), 10))->wait(5s);
  EXPECT_EQ(out.error.code, errc::context_length);
  EXPECT_EQ(out.id, 0u);
  auto s = test::prompt_spec("x", 4);
  s.model = "gpt-9";
  out = c.submit(s)->wait(5s);
  EXPECT_EQ(out.error.code, errc::unknown_model);
  EXPECT_NE(out.error.message.find("fake"), std::string::npos);
  auto st = p->get_admission_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->rejected, 2);
}

TEST(pipeline, queue_cap_rejects_with_retry_after) {
  runtime rt;
  fake_options fo;
  fo.step_us = 2000;
  auto cfg = small_config();
  cfg.admission.max_pending = 4;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> s;
  for (int i = 0; i < 10; ++i) s.push_back(c.submit(test::prompt_spec("q" + std::to_string(i), 30)));
  int ok = 0, overloaded = 0;
  for (auto& x : s) {
    auto out = x->wait(20s);
    if (out.ok()) ++ok;
    if (out.error.code == errc::overloaded) {
      ++overloaded;
      EXPECT_GT(out.error.retry_after_ms, 0);
    }
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(overloaded, 6);
  // Capacity comes back as requests finish.
  EXPECT_TRUE(c.submit(test::prompt_spec("again", 3))->wait(10s).ok());
}

TEST(pipeline, exact_repeat_is_served_from_the_cache) {
  runtime rt;
  fake_options fo;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto first = c.submit(test::prompt_spec("cache me", 10))->wait(10s);
  ASSERT_TRUE(first.ok());
  auto second = c.submit(test::prompt_spec("cache me", 10))->wait(10s);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.finish_reason, first.finish_reason);
  auto other = c.submit(test::prompt_spec("cache me", 11))->wait(10s);
  EXPECT_FALSE(other.cached);
  auto st = p->get_cache_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->hits, 1);
}

request_spec chat_of(const std::string& system, const std::string& question, int32_t max_tokens) {
  request_spec s;
  if (!system.empty()) s.messages.push_back({"system", system});
  s.messages.push_back({"user", question});
  s.max_tokens = max_tokens;
  return s;
}

TEST(pipeline, semantic_cache_answers_a_paraphrase_with_its_similarity) {
  runtime rt;
  fake_options fo;
  test::temp_dir dir("pipeline-semcache");
  auto cfg = small_config();
  cfg.cache.policy = "semantic";
  cfg.cache.semantic.path = dir.str("db");
  cfg.cache.semantic.embedder = "hashed_ngrams";  // MiniLM is exercised by the real-model tests
  cfg.cache.semantic.threshold = 0.80f;
  cfg.cache.semantic.async_insert = false;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto first = c.submit(chat_of("", "What is the capital city of France?", 12))->wait(10s);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first.cached);

  // The same question: the exact path, similarity 1.
  auto again = c.submit(chat_of("", "What is the capital city of France?", 12))->wait(10s);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.cached);
  EXPECT_FLOAT_EQ(again.similarity, 1.0f);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.text, first.text);
  // With other whitespace it is another prompt for the exact path; the semantic path, which
  // reads whitespace runs as one space, serves it.
  auto spaced = c.submit(chat_of("", "What is the  capital city of France? ", 12))->wait(10s);
  ASSERT_TRUE(spaced.ok());
  EXPECT_TRUE(spaced.cached);
  EXPECT_EQ(spaced.tokens, first.tokens);

  // A near paraphrase: served by meaning, with its cosine.
  auto para = c.submit(chat_of("", "what is the capital city of France", 12))->wait(10s);
  ASSERT_TRUE(para.ok());
  EXPECT_TRUE(para.cached);
  EXPECT_GE(para.similarity, 0.80f);
  EXPECT_LT(para.similarity, 1.0f);
  EXPECT_EQ(para.tokens, first.tokens);

  // Another persona never shares the answer; nor does another max_tokens.
  EXPECT_FALSE(c.submit(chat_of("You are a pirate.", "What is the capital city of France?", 12))->wait(10s).cached);
  EXPECT_FALSE(c.submit(chat_of("", "What is the capital city of France?", 13))->wait(10s).cached);
  // Sampled requests are not cached unless they ask.
  auto sampled = chat_of("", "What is the capital city of France?", 12);
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 7;
  EXPECT_FALSE(c.submit(sampled)->wait(10s).cached);

  auto st = p->get_cache_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->policy, "semantic");
  EXPECT_TRUE(st->enabled);
  EXPECT_EQ(st->hits, 3);
  EXPECT_EQ(st->semantic_hits, 2);
}

TEST(pipeline, unusable_cache_store_serves_every_request_uncached) {
  runtime rt;
  fake_options fo;
  test::temp_dir dir("pipeline-badcache");
  {
    std::FILE* f = std::fopen(dir.str("not-a-dir").c_str(), "w");
    ASSERT_TRUE(f);
    std::fputs("x", f);
    std::fclose(f);
  }
  auto cfg = small_config();
  cfg.cache.policy = "semantic";
  cfg.cache.semantic.path = dir.str("not-a-dir");  // a file: RocksDB cannot open it
  cfg.cache.semantic.embedder = "hashed_ngrams";
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  for (int i = 0; i < 2; ++i) {
    auto out = c.submit(chat_of("", "Same question twice", 8))->wait(10s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    EXPECT_FALSE(out.cached);
  }
  auto st = p->get_cache_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->enabled);
  EXPECT_NE(st->status.find("disabled"), std::string::npos) << st->status;
}

TEST(pipeline, unknown_cache_policy_stops_startup_and_names_the_known_ones) {
  runtime rt;
  fake_options fo;
  auto cfg = small_config();
  cfg.cache.policy = "psychic";
  auto p = pipeline::start(rt.system(), cfg, test::fake_maker(fo), make_byte_codec(fo.n_vocab, fo.eog));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("psychic"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("exact"), std::string::npos) << p.error();
  EXPECT_NE(p.error().find("semantic"), std::string::npos) << p.error();
  cfg.cache.enabled = false;  // a disabled cache's policy name does not matter
  EXPECT_TRUE(pipeline::start(rt.system(), cfg, test::fake_maker(fo), make_byte_codec(fo.n_vocab, fo.eog)).ok());
}

TEST(pipeline, stop_strings_end_the_stream_without_leaking) {
  runtime rt;
  fake_options fo;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  const auto ref = text_of(fake_reference(fo, bytes("stop test"), 40));
  const std::string stop = ref.substr(10, 3);
  const auto cut = ref.find(stop);
  auto s = test::prompt_spec("stop test", 40);
  s.stop = {stop};
  auto out = c.submit(s)->wait(10s);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.finish_reason, finish::stop);
  EXPECT_EQ(out.text, ref.substr(0, cut));
  settle(*p);
}

TEST(pipeline, cancel_mid_stream) {
  runtime rt;
  fake_options fo;
  fo.step_us = 1000;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto s = c.submit(test::prompt_spec("long one", 200));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->next(5s));
  s->cancel();
  auto out = s->wait(5s);
  EXPECT_EQ(out.finish_reason, finish::cancelled);
  EXPECT_LT(out.usage.completion_tokens, 200);
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
}

TEST(pipeline, dropping_the_stream_cancels_the_request) {
  runtime rt;
  fake_options fo;
  fo.step_us = 1000;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  {
    auto s = c.submit(test::prompt_spec("abandoned", 200));
    ASSERT_TRUE(s->next(5s));
  }
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
  EXPECT_GE(st.dropped, 1);
}

TEST(pipeline, thousand_random_cancels_under_load_free_every_block) {
  runtime rt;
  fake_options fo;
  fo.n_blocks = 96;  // under pressure: preemptions happen too
  fo.eog_every = 30;
  fo.token_us = 2;
  auto cfg = small_config();
  cfg.scheduler.max_num_seqs = 24;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  constexpr int n = 1000;
  std::atomic<int> ended{0}, cancelled{0}, finished{0}, failed{0};
  std::vector<request_handle> handles;
  std::mt19937 rng(7);
  for (int i = 0; i < n; ++i) {
    handles.push_back(c.submit(test::prompt_spec("load " + std::to_string(i), 1 + static_cast<int32_t>(rng() % 60)),
                               [&](const event& e) {
                                 if (auto* d = std::get_if<done_event>(&e)) {
                                   (d->finish_reason == finish::cancelled ? cancelled : finished)++;
                                   ++ended;
                                 } else if (std::holds_alternative<error_event>(e)) {
                                   ++failed;
                                   ++ended;
                                 }
                               }));
    // Cancel a random earlier request; some are queued, some running, some done already.
    if (rng() % 2) handles[rng() % handles.size()].cancel();
    if (i % 50 == 0) std::this_thread::sleep_for(1ms);
  }
  for (int i = 0; i < 3000 && ended.load() < n; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(ended.load(), n) << "finished " << finished << " cancelled " << cancelled << " failed " << failed;
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(cancelled.load(), 100);
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
  EXPECT_EQ(st.kv_blocks_used, 0);
  auto ss = p->get_streamer_stats();
  ASSERT_TRUE(ss.ok());
  EXPECT_EQ(ss->open_streams, 0);
  auto as = p->get_admission_stats();
  ASSERT_TRUE(as.ok());
  EXPECT_EQ(as->pending, 0);
}

// A backend that throws whenever one request's prompt is in the batch (its \x01 byte): the
// executor dies with each such step and is restarted; only that request fails, the others in
// the same batches continue, recomputed from their tokens, with the text they have alone.
TEST(pipeline, an_executor_fault_fails_only_the_faulty_request_then_recovers) {
  runtime rt;
  fake_options fo;
  fo.step_us = 500;
  fo.fault_token = 1;
  fo.fault_throws = true;
  auto built = std::make_shared<std::atomic<int>>(0);
  backend_maker maker = [fo, built]() -> result<std::unique_ptr<model::backend>> {
    built->fetch_add(1);
    return std::unique_ptr<model::backend>(new fake_backend(fo));
  };
  auto p = pipeline::start(rt.system(), small_config(), maker, make_byte_codec());
  ASSERT_TRUE(p.ok()) << p.error();
  client c(**p);
  std::vector<std::unique_ptr<stream>> s;
  for (int i = 0; i < 5; ++i) s.push_back(c.submit(test::prompt_spec("bystander " + std::to_string(i), 50)));
  std::this_thread::sleep_for(20ms);  // the bystanders are decoding when the faulty one comes
  auto victim = c.submit(test::prompt_spec("poison \x01 pill", 50));
  auto bad = victim->wait(20s);
  ASSERT_NE(bad.error.code, errc::timeout) << "the faulty request hung";
  EXPECT_EQ(bad.error.code, errc::executor_fault);
  EXPECT_NE(bad.error.message.find("injected fault"), std::string::npos) << bad.error.message;
  for (int i = 0; i < 5; ++i) {
    auto out = s[static_cast<size_t>(i)]->wait(20s);
    ASSERT_TRUE(out.ok()) << i << ": " << out.error.code << " " << out.error.message;
    EXPECT_EQ(out.tokens, fake_reference(fo, bytes("bystander " + std::to_string(i)), 50)) << i;
  }
  EXPECT_GE(built->load(), 2) << "the executor was restarted";
  // The restarted executor serves new requests.
  for (int i = 0; i < 3; ++i) {
    auto out = c.submit(test::prompt_spec("after " + std::to_string(i), 10))->wait(20s);
    ASSERT_TRUE(out.ok()) << out.error.message;
    EXPECT_EQ(out.tokens, fake_reference(fo, bytes("after " + std::to_string(i)), 10));
  }
  auto st = settle(**p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
}

// The scheduler dies mid-stream: the supervisor restarts it, and the router places each of its
// requests again from the tokens already delivered, so every stream goes on to the text an
// undisturbed greedy run gives, with no gap and no repeat.
TEST(pipeline, a_crashed_scheduler_s_streams_continue_where_they_were) {
  runtime rt;
  fake_options fo;
  fo.step_us = 1000;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> s;
  std::vector<completion> got(4);
  for (int i = 0; i < 4; ++i) s.push_back(c.submit(test::prompt_spec("crash " + std::to_string(i), 120)));
  // Every stream has some tokens: they are mid-stream when the scheduler dies.
  for (int i = 0; i < 4; ++i) {
    bool ended = false;
    while (!ended && got[static_cast<size_t>(i)].tokens.size() < 5) {
      auto e = s[static_cast<size_t>(i)]->next(10s);
      ASSERT_TRUE(e) << "stream " << i << " stalled before the crash";
      ended = add_event(got[static_cast<size_t>(i)], *e);
    }
    ASSERT_FALSE(ended) << "stream " << i << " ended before the crash";
  }
  const auto victim = p->links().scheduler;
  caf::anon_send_exit(victim, caf::exit_reason::kill);
  for (int i = 0; i < 4; ++i) {
    auto& g = got[static_cast<size_t>(i)];
    bool ended = false;
    while (!ended) {
      auto e = s[static_cast<size_t>(i)]->next(20s);
      ASSERT_TRUE(e) << "stream " << i << " hung after the crash";
      ended = add_event(g, *e);
    }
    ASSERT_TRUE(g.ok()) << i << ": " << g.error.code << " " << g.error.message;
    EXPECT_EQ(g.tokens, fake_reference(fo, bytes("crash " + std::to_string(i)), 120)) << i;
    EXPECT_EQ(g.finish_reason, finish::length);
  }
  EXPECT_NE(p->links().scheduler, victim) << "the scheduler was restarted";
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
}

TEST(pipeline, an_executor_that_cannot_be_restarted_fails_requests_fast) {
  runtime rt;
  fake_options fo;
  fo.throw_on_call = 3;
  auto built = std::make_shared<std::atomic<int>>(0);
  backend_maker maker = [fo, built]() -> result<std::unique_ptr<model::backend>> {
    if (built->fetch_add(1) > 0) return make_error("the device is gone");
    return std::unique_ptr<model::backend>(new fake_backend(fo));
  };
  auto cfg = small_config();
  cfg.max_restarts = 2;
  auto p = pipeline::start(rt.system(), cfg, maker, make_byte_codec());
  ASSERT_TRUE(p.ok()) << p.error();
  client c(**p);
  auto first = c.submit(test::prompt_spec("doomed", 20))->wait(10s);
  EXPECT_EQ(first.error.code, errc::executor_fault);
  completion later;
  for (int i = 0; i < 100; ++i) {  // once the supervisor gives up, requests fail at once
    later = c.submit(test::prompt_spec("later", 5))->wait(10s);
    ASSERT_NE(later.error.code, errc::timeout);
    if (later.error.message.find("could not be restarted") != std::string::npos) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(later.error.code, errc::executor_fault);
  EXPECT_NE(later.error.message.find("the device is gone"), std::string::npos) << later.error.message;
}

TEST(pipeline, slow_consumer_is_paused_then_cut_off_without_stalling_others) {
  runtime rt;
  fake_options fo;
  fo.step_us = 300;
  auto cfg = small_config();
  cfg.streamer.buffer_tokens = 4;
  cfg.streamer.slow_consumer_timeout_ms = 300;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto slow = c.submit(test::prompt_spec("slow reader", 200));
  auto fast = c.submit(test::prompt_spec("fast reader", 100));
  auto out = fast->wait(20s);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.tokens.size(), 100u);
  // The slow stream was paused at its buffer, then cut off.
  std::this_thread::sleep_for(500ms);
  auto rest = slow->wait(5s);
  EXPECT_EQ(rest.finish_reason, finish::slow_consumer);
  EXPECT_LE(rest.tokens.size(), 4u);
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
  auto ss = p->get_streamer_stats();
  ASSERT_TRUE(ss.ok());
  EXPECT_EQ(ss->slow_consumers, 1);
}

TEST(pipeline, a_consumer_that_keeps_up_slowly_is_not_cut_off) {
  runtime rt;
  fake_options fo;
  auto cfg = small_config();
  cfg.streamer.buffer_tokens = 4;
  cfg.streamer.slow_consumer_timeout_ms = 2000;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto s = c.submit(test::prompt_spec("patient", 30));
  completion out;
  for (;;) {
    auto e = s->next(10s);
    ASSERT_TRUE(e);
    if (add_event(out, *e)) break;
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(out.finish_reason, finish::length);
  EXPECT_EQ(out.tokens, fake_reference(fo, bytes("patient"), 30));
  auto ss = p->get_streamer_stats();
  ASSERT_TRUE(ss.ok());
  EXPECT_GT(ss->pauses, 0);
}

TEST(pipeline, deadlines) {
  runtime rt;
  fake_options fo;
  fo.step_us = 4000;  // `a` would need a second; machines under load make the margins wide
  auto cfg = small_config();
  cfg.scheduler.max_num_seqs = 1;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto a = test::prompt_spec("runs", 250);
  a.deadline_ms = 500;
  auto b = test::prompt_spec("queued", 10);
  b.deadline_ms = 200;
  auto sa = c.submit(a);
  completion oa;
  auto first = sa->next(5s);  // `a` runs; `b` queues behind it (one sequence at a time)
  ASSERT_TRUE(first && std::holds_alternative<token_event>(*first));
  add_event(oa, *first);
  auto sb = c.submit(b);
  while (auto e = sa->next(10s))
    if (add_event(oa, *e)) break;
  auto ob = sb->wait(10s);
  EXPECT_EQ(oa.finish_reason, finish::deadline);
  EXPECT_GT(oa.tokens.size(), 0u);
  EXPECT_EQ(ob.error.code, errc::deadline);
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
}

TEST(pipeline, a_killed_actor_is_restarted_and_serving_goes_on) {
  runtime rt;
  fake_options fo;
  fo.step_us = 1000;
  auto p = test::start_fake(rt, small_config(), fo);
  ASSERT_TRUE(p);
  client c(*p);
  auto role_of = [](const pipeline_links& l, const std::string& role) {
    if (role == "streamer") return l.streamer;
    if (role == "scheduler") return l.scheduler;
    if (role == "cache") return l.cache;
    if (role == "admission") return l.admission;
    return l.executor;
  };
  for (std::string role : {"streamer", "scheduler", "cache", "admission", "executor"}) {
    SCOPED_TRACE(role);
    auto open = c.submit(test::prompt_spec("in flight", 200));
    ASSERT_TRUE(open->next(5s));  // it is streaming
    const auto victim = role_of(p->links(), role);
    caf::anon_send_exit(victim, caf::exit_reason::kill);
    // The open stream ends (an error, or for the cache and admission, normally): it never hangs.
    auto out = open->wait(10s);
    EXPECT_NE(out.error.code, errc::timeout) << "the open stream hung";
    bool replaced = false;
    for (int i = 0; i < 500 && !replaced; ++i) {
      const auto now = role_of(p->links(), role);
      replaced = now && now != victim;
      if (!replaced) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(replaced);
    completion fresh;
    for (int attempt = 0; attempt < 50; ++attempt) {  // the executor's replacement may still be starting
      fresh = c.submit(test::prompt_spec("after restart", 5))->wait(10s);
      if (fresh.ok()) break;
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_TRUE(fresh.ok()) << fresh.error.code << ": " << fresh.error.message;
    EXPECT_EQ(fresh.tokens, fake_reference(fo, bytes("after restart"), 5));
  }
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
}

TEST(pipeline, start_errors_name_the_problem) {
  runtime rt;
  auto cfg = small_config();
  cfg.scheduler.policy = "lottery";
  auto p = pipeline::start(rt.system(), cfg, test::fake_maker({}), make_byte_codec());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("fcfs, priority, sjf, static"), std::string::npos) << p.error();
  backend_maker broken = []() -> result<std::unique_ptr<model::backend>> { return make_error("no such device"); };
  p = pipeline::start(rt.system(), small_config(), broken, make_byte_codec());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().find("no such device"), std::string::npos) << p.error();
}

TEST(executor_actor, answers_steps_and_info) {
  runtime rt;
  fake_options fo;
  auto exec = spawn_executor(rt.system(), test::fake_maker(fo));
  caf::scoped_actor self{rt.system()};
  self->request(exec, 5s, info_atom::value)
      .receive([&](const executor_info& i) { EXPECT_EQ(i.n_blocks, fo.n_blocks); },
               [&](caf::error& e) { FAIL() << caf::to_string(e); });
  step_plan plan;
  plan.step = 1;
  step_entry e;
  e.seq_id = 9;
  e.tokens = {65, 66, 67};
  e.block_table = {0};
  e.sample = true;
  plan.entries.push_back(e);
  self->request(exec, 5s, step_atom::value, plan)
      .receive(
          [&](const step_result& r) {
            ASSERT_EQ(r.samples.size(), 1u);
            EXPECT_EQ(r.samples[0].token, fake_reference(fo, {65, 66, 67}, 1)[0]);
          },
          [&](caf::error& err) { FAIL() << caf::to_string(err); });
  self->send_exit(exec, caf::exit_reason::user_shutdown);
}

// Hot reload: the scheduler is replaced over and over while 64 streams run (some preempted for
// KV, some with priorities); every stream ends with exactly the tokens it gets alone, no KV
// block leaks, and the new policy is the one reported.
TEST(pipeline, scheduler_swaps_under_load_keep_every_stream_exact) {
  runtime rt;
  fake_options fo;
  fo.eog_every = 40;
  fo.n_blocks = 160;       // tight: preemption happens across swaps
  fo.step_us = 2000;       // steps take time, so swaps land while steps are in flight
  auto cfg = small_config();
  cfg.scheduler.max_num_seqs = 24;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::vector<std::unique_ptr<stream>> streams;
  std::vector<std::string> prompts;
  std::vector<int32_t> max_tokens;
  for (int i = 0; i < 64; ++i) {
    prompts.push_back("swap " + std::to_string(i) + std::string(static_cast<size_t>(i % 9) * 3, 'y'));
    max_tokens.push_back(30 + (i * 7) % 50);
    auto s = test::prompt_spec(prompts.back(), max_tokens.back());
    s.priority = i % 3;
    streams.push_back(c.submit(s));
  }
  const std::vector<std::string> cycle = {"priority", "sjf", "fcfs"};
  int swaps = 0;
  auto next = cfg;
  for (int k = 0; k < 60; ++k) {
    next.scheduler.policy = cycle[static_cast<size_t>(k) % cycle.size()];
    next.scheduler.max_num_seqs = 16 + (k % 3) * 8;  // budgets change too
    auto r = p->reconfigure(next, test::changed_stages(p->config(), next), 10s);
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0], "scheduler");
    ++swaps;
    auto st = p->get_scheduler_stats();
    ASSERT_TRUE(st.ok()) << st.error();
    EXPECT_EQ(st->policy, next.scheduler.policy);
    std::this_thread::sleep_for(5ms);
  }
  for (int i = 0; i < 64; ++i) {
    auto out = streams[static_cast<size_t>(i)]->wait(60s);
    ASSERT_TRUE(out.ok()) << i << ": " << out.error.message;
    EXPECT_EQ(out.tokens, fake_reference(fo, bytes(prompts[static_cast<size_t>(i)]), max_tokens[static_cast<size_t>(i)]))
        << i;
  }
  EXPECT_EQ(swaps, 60);
  auto st = settle(*p);
  EXPECT_EQ(st.kv_blocks_available, st.kv_blocks_total);
  // An unchanged config replaces nothing; an unknown policy is refused and the running one stays.
  auto same = p->reconfigure(next, test::changed_stages(p->config(), next));
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->empty());
  auto bad = next;
  bad.scheduler.policy = "lottery";
  auto refused = p->reconfigure(bad, test::changed_stages(p->config(), bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("lottery"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("fcfs"), std::string::npos) << refused.error();
  EXPECT_EQ(p->get_scheduler_stats()->policy, next.scheduler.policy);
  EXPECT_TRUE(c.submit(test::prompt_spec("after the swaps", 6))->wait(10s).ok());
}

// Push mode with manual acks (what the WebSocket server uses: a token counts once its frame is
// written): without acks the stream stops at its buffer (paused at the scheduler, holding its
// KV) instead of piling up events; acks let it go on to the end.
TEST(pipeline, manual_acks_pause_a_push_stream_until_acknowledged) {
  runtime rt;
  fake_options fo;
  // Steps of a real model's order (2 ms): pausing is a message from the streamer, and a backend
  // that makes all 40 tokens before it arrives (the fake one takes microseconds) finishes the
  // sequence, which then has nothing to pause.
  fo.step_us = 2000;
  auto cfg = small_config();
  cfg.streamer.buffer_tokens = 4;
  cfg.streamer.slow_consumer_timeout_ms = 5000;
  auto p = test::start_fake(rt, cfg, fo);
  ASSERT_TRUE(p);
  client c(*p);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  bool done = false;
  auto h = c.submit(test::prompt_spec("ack me", 40),
                    [&](const event& e) {
                      std::lock_guard<std::mutex> lock(mu);
                      if (auto* t = std::get_if<token_event>(&e)) tokens.push_back(t->token);
                      else done = true;
                      cv.notify_all();
                    },
                    ack_mode::manual);
  std::this_thread::sleep_for(300ms);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(tokens.size(), 4u) << "the stream must stop at its 4 unacknowledged tokens";
    EXPECT_FALSE(done);
  }
  auto st = p->get_scheduler_stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->paused, 1);
  // Acknowledge as a writer would, a few at a time, until the end.
  size_t acked = 0;
  std::unique_lock<std::mutex> lock(mu);
  while (!done) {
    const size_t n = tokens.size() - acked;
    acked = tokens.size();
    lock.unlock();
    h.ack(static_cast<int32_t>(n));
    lock.lock();
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return done || tokens.size() > acked; })) << "no progress after an ack";
  }
  EXPECT_EQ(tokens, fake_reference(fo, bytes("ack me"), 40));
}

// net/resume_store: the WebSocket resumption window, resume keys and flow control.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "net/resume_store.hpp"
#include "net/ws_protocol.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {
// A record keeps each token's text and makes its frame as it hands it out.
std::string tok(const char* id, int32_t index, const char* text) { return token_frame(id, index, text); }
}  // namespace

TEST(resume_store, replays_after_index_then_goes_live_without_gaps_or_duplicates) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "r1");
  ASSERT_TRUE(rec);
  EXPECT_FALSE(store.create("", "r1")) << "a running id cannot be reused";
  std::vector<std::string> first, second;
  int tag1 = 0, tag2 = 0;
  rec->attach([&](std::string f, std::function<void()>) { first.push_back(f); }, -1, &tag1);
  rec->add_token(0, "t0");
  rec->add_token(1, "t1");
  const auto t = stream_record::clock::now();
  rec->detach(&tag1, t, std::chrono::milliseconds(1000));
  rec->add_token(2, "t2");  // produced while nobody is attached
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { second.push_back(f); }, 0, &tag2));
  rec->add_token(3, "t3");
  rec->finish("done", t, std::chrono::milliseconds(1000));
  EXPECT_EQ(first, (std::vector<std::string>{tok("r1", 0, "t0"), tok("r1", 1, "t1")}));
  EXPECT_EQ(second, (std::vector<std::string>{tok("r1", 1, "t1"), tok("r1", 2, "t2"), tok("r1", 3, "t3"), "done"}));
  EXPECT_EQ(store.sweep(t + std::chrono::milliseconds(500)), 0u);
  EXPECT_TRUE(store.create("", "r1") == nullptr ? false : true) << "an ended id may be reused";
}

// A stream ends once: a second final frame (a pipeline answering twice) reaches nobody, attached
// or resuming, and the first stays what a resume replays.
TEST(resume_store, a_stream_has_one_final_frame) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "f1", "secret-secret-secret");
  ASSERT_TRUE(rec);
  std::vector<std::string> seen, later;
  int tag1 = 0, tag2 = 0;
  rec->attach([&](std::string f, std::function<void()>) { seen.push_back(f); }, -1, &tag1);
  rec->add_token(0, "t0");
  const auto t = stream_record::clock::now();
  rec->finish("done", t, std::chrono::milliseconds(1000));
  rec->finish("error", t, std::chrono::milliseconds(1000));
  EXPECT_EQ(seen, (std::vector<std::string>{tok("f1", 0, "t0"), "done"}));
  rec->detach(&tag1, t, std::chrono::milliseconds(1000));
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { later.push_back(f); }, 0, &tag2));
  EXPECT_EQ(later, (std::vector<std::string>{"done"}));
}

// Only the generate's resume_key resumes a stream (none: it cannot be resumed); a connection that
// still holds a stream when another resumes it gets the `displaced` frame, and no frame after.
TEST(resume_store, resume_keys_and_the_displaced_connection) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "s1", "secret-secret-secret");
  EXPECT_TRUE(rec->resumable_with("secret-secret-secret"));
  EXPECT_FALSE(rec->resumable_with("secret-secret-secreT"));
  EXPECT_FALSE(rec->resumable_with(""));
  EXPECT_FALSE(store.create("", "s2")->resumable_with("")) << "no key: not resumable";
  std::vector<std::string> a, b;
  int tag_a = 0, tag_b = 0;
  rec->attach([&](std::string f, std::function<void()>) { a.push_back(f); }, -1, &tag_a, "moved");
  rec->add_token(0, "t0");
  EXPECT_TRUE(rec->attached_to(&tag_a));
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { b.push_back(f); }, 0, &tag_b, "moved"));
  EXPECT_FALSE(rec->attached_to(&tag_a));
  EXPECT_TRUE(rec->attached_to(&tag_b));
  EXPECT_FALSE(rec->attached_to(nullptr));
  rec->add_token(1, "t1");
  rec->finish("done", stream_record::clock::now(), std::chrono::milliseconds(1000));
  EXPECT_EQ(a, (std::vector<std::string>{tok("s1", 0, "t0"), "moved"}));
  EXPECT_EQ(b, (std::vector<std::string>{tok("s1", 1, "t1"), "done"}));
  // Resuming an ended stream displaces nobody: the holder had its final frame already.
  std::vector<std::string> c;
  int tag_c = 0;
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()>) { c.push_back(f); }, 0, &tag_c, "moved"));
  EXPECT_EQ(b, (std::vector<std::string>{tok("s1", 1, "t1"), "done"}));
  EXPECT_EQ(c, (std::vector<std::string>{tok("s1", 1, "t1"), "done"}));
  // Ended but resumable within its window: only its key may take the id over.
  EXPECT_FALSE(store.create("", "s1", "someone-else-entirely"));
  EXPECT_FALSE(store.create("", "s1"));
  EXPECT_TRUE(store.create("", "s1", "secret-secret-secret"));
  // A keyless ended stream's id is free at once.
  auto keyless = store.create("", "s3");
  keyless->finish("done", stream_record::clock::now(), std::chrono::milliseconds(1000));
  EXPECT_TRUE(store.create("", "s3", "new-owner-new-owner"));
}

// A resume from an index beyond what was made gets only the tokens after it, live ones included.
TEST(resume_store, resume_from_beyond_the_recorded_tokens_skips_up_to_it) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "far", "secret-secret-secret");
  int acked = 0;
  rec->set_ack([&](int32_t n) { acked += n; });
  rec->add_token(0, "t0");
  std::vector<std::string> got;
  std::vector<std::function<void()>> written;  // (a sink posts; it never calls back inline)
  int tag = 0;
  ASSERT_TRUE(rec->attach([&](std::string f, std::function<void()> w) {
    got.push_back(f);
    if (w) written.push_back(std::move(w));
  }, 2, &tag));
  rec->add_token(1, "t1");
  rec->add_token(2, "t2");
  rec->add_token(3, "t3");
  for (auto& w : written) w();
  EXPECT_EQ(got, (std::vector<std::string>{tok("far", 3, "t3")}));
  EXPECT_EQ(acked, 4) << "skipped tokens count as consumed";
}

TEST(resume_store, expiry_cancels_orphaned_streams) {
  resume_store store(std::chrono::milliseconds(10), 2);
  auto rec = store.create("k", "x");
  bool cancelled = false;
  rec->set_cancel([&] { cancelled = true; });
  int tag = 0;
  rec->attach([](std::string, std::function<void()>) {}, -1, &tag);
  rec->add_token(0, "a");
  rec->add_token(1, "b");
  rec->add_token(2, "c");  // keeps 2: index 0 is gone
  EXPECT_FALSE(rec->attach([](std::string, std::function<void()>) {}, -1, &tag)) << "token 0 was dropped from the window";
  const auto t = stream_record::clock::now();
  rec->detach(&tag, t, std::chrono::milliseconds(10));
  EXPECT_EQ(store.sweep(t + std::chrono::milliseconds(20)), 1u);
  EXPECT_TRUE(cancelled);
  EXPECT_FALSE(store.find("k", "x"));
}

// Flow control: a token counts as consumed when its connection wrote it; while nobody is
// attached, at once; a connection that goes away releases what it had not written; acks that
// come before the pipeline's ack function is known are kept for it.
TEST(resume_store, tokens_are_acknowledged_when_written_or_released) {
  resume_store store(std::chrono::milliseconds(1000), 100);
  auto rec = store.create("", "f1");
  std::vector<std::function<void()>> pending;
  int tag = 0, tag2 = 0;
  rec->attach([&](std::string, std::function<void()> w) { if (w) pending.push_back(std::move(w)); }, -1, &tag);
  rec->add_token(0, "t0");  // before set_ack: remembered
  int acked = 0;
  rec->set_ack([&](int32_t n) { acked += n; });
  rec->add_token(1, "t1");
  rec->add_token(2, "t2");
  EXPECT_EQ(acked, 0) << "nothing is written yet";
  ASSERT_EQ(pending.size(), 3u);
  pending[0]();
  pending[1]();
  EXPECT_EQ(acked, 2);
  // The connection goes away with t2 unwritten: released on detach; its late callback is ignored.
  const auto t = stream_record::clock::now();
  rec->detach(&tag, t, std::chrono::milliseconds(1000));
  EXPECT_EQ(acked, 3);
  pending[2]();
  EXPECT_EQ(acked, 3);
  rec->add_token(3, "t3");  // nobody attached: acknowledged at once
  EXPECT_EQ(acked, 4);
  pending.clear();
  ASSERT_TRUE(rec->attach([&](std::string, std::function<void()> w) { if (w) pending.push_back(std::move(w)); }, 1, &tag2));
  EXPECT_TRUE(pending.empty()) << "replayed frames were acknowledged already";
  rec->add_token(4, "t4");
  ASSERT_EQ(pending.size(), 1u);
  pending[0]();
  EXPECT_EQ(acked, 5);
}

// app/serve/fresh_figures: /metrics and /health requests held until a round of figures that
// began after them is done (or max_wait passed), without holding the I/O thread.
#include "app/serve/fresh_figures.hpp"

#include <gtest/gtest.h>

#include <thread>

using troupe::app::fresh_figures;

TEST(fresh_figures, without_a_poller_a_request_is_answered_at_once) {
  fresh_figures f;
  int answered = 0;
  f.hold([&] { ++answered; });
  EXPECT_EQ(answered, 1);
  EXPECT_FALSE(f.holding());
}

TEST(fresh_figures, a_request_waits_for_a_round_that_began_after_it) {
  fresh_figures f;
  int wakes = 0;
  f.set_waker([&] { ++wakes; });
  int first = 0, second = 0;
  f.hold([&] { ++first; });
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(first, 0);
  // A round that began before the request (it read asked() as 0) does not answer it.
  f.answered(0);
  EXPECT_EQ(first, 0);
  // A round begins (reads asked() = 1); a second request comes while it runs.
  const uint64_t asked = f.asked();
  f.hold([&] { ++second; });
  f.answered(asked);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 0) << "it came after the round began: the next round answers it";
  EXPECT_TRUE(f.holding());
  f.answered(f.asked());
  EXPECT_EQ(second, 1);
  EXPECT_FALSE(f.holding());
}

TEST(fresh_figures, a_request_held_past_max_wait_gets_the_last_figures) {
  fresh_figures f;
  f.set_waker([] {});
  int answered = 0;
  f.hold([&] { ++answered; });
  std::this_thread::sleep_for(fresh_figures::max_wait + std::chrono::milliseconds(20));
  f.answered(0);  // a round of the router's figures only: still answers what waited too long
  EXPECT_EQ(answered, 1);
}

TEST(fresh_figures, a_stopping_poller_answers_every_request_held) {
  fresh_figures f;
  f.set_waker([] {});
  int answered = 0;
  f.hold([&] { ++answered; });
  f.hold([&] { ++answered; });
  f.set_waker({});
  EXPECT_EQ(answered, 2);
  f.hold([&] { ++answered; });
  EXPECT_EQ(answered, 3);
}

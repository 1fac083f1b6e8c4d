// step_cost: the step time table, and the rule that says when speculation pays.
#include <gtest/gtest.h>

#include "actors/scheduler/speculative/step_cost.hpp"

using namespace troupe::actors;

TEST(step_cost, averages_interpolates_and_knows_what_it_has_not_measured) {
  step_cost c;
  EXPECT_FALSE(c.time_us(1).has_value());
  c.record(4, 1000);
  EXPECT_DOUBLE_EQ(*c.time_us(4), 1000.0);
  c.record(4, 2000);  // a moving average: a quarter of the way to the new time
  EXPECT_DOUBLE_EQ(*c.time_us(4), 1250.0);
  c.record(12, 3250);
  EXPECT_DOUBLE_EQ(*c.time_us(8), 2250.0);  // halfway between 4 and 12
  EXPECT_DOUBLE_EQ(*c.time_us(2), 625.0);   // below every measurement: proportional to the nearest
  EXPECT_FALSE(c.time_us(13).has_value());  // above every measurement: unknown
  c.record(5000, 9000);                     // past the table: shares its last entry
  EXPECT_DOUBLE_EQ(*c.time_us(step_cost::max_tokens), 9000.0);
  EXPECT_TRUE(c.time_us(20).has_value());
  c.record(0, 10);  // nothing fed: ignored
  c.record(3, -5);  // a clock that went back: ignored
  EXPECT_DOUBLE_EQ(*c.time_us(3), 937.5);
}

TEST(step_cost, speculation_pays_where_extra_positions_are_cheap_against_what_they_save) {
  step_cost flat, steep;
  for (int32_t n : {1, 5, 16, 20, 64}) {
    flat.record(n, 10000 + 50 * n);    // memory-bound: the weights' reading dominates
    steep.record(n, 1000 + 1000 * n);  // compute-bound: every position costs
  }
  // Batch 1, nothing else to pipeline: 2 tokens expected from 4 guesses.
  EXPECT_TRUE(speculation_pays(flat, 2.0, 4, 1, 1, false));
  EXPECT_FALSE(speculation_pays(steep, 2.0, 4, 1, 1, false));  // 4 ms more for 4 ms saved: no gain
  EXPECT_TRUE(speculation_pays(steep, 3.5, 4, 1, 1, false));   // 7 ms saved
  // Batch 16, pipelined: the sequence is in every other step, so it must expect more than one
  // extra token to gain at all, and the extra time is paid by all 16.
  EXPECT_FALSE(speculation_pays(flat, 1.0, 4, 16, 16, true));
  EXPECT_TRUE(speculation_pays(flat, 3.0, 4, 16, 16, true));
  EXPECT_FALSE(speculation_pays(steep, 4.0, 4, 16, 16, true));
  // Nothing to verify, or nothing expected: no.
  EXPECT_FALSE(speculation_pays(flat, 0.0, 4, 1, 1, false));
  EXPECT_FALSE(speculation_pays(flat, 2.0, 0, 1, 1, false));
  // Not measured at that size yet: it tries, so that the table learns.
  EXPECT_TRUE(speculation_pays(steep, 2.0, 4, 64, 64, true));
  EXPECT_TRUE(speculation_pays(step_cost{}, 0.5, 4, 1, 1, false));
  // A draft model's forwards count with the verified positions: on the memory-bound step 2 of 4
  // guesses pay for themselves (20 ms saved for 0.2 ms), not when making them costs 4 x 6 ms.
  EXPECT_TRUE(speculation_pays(flat, 2.0, 4, 1, 1, false, 4 * 1000.0));
  EXPECT_FALSE(speculation_pays(flat, 2.0, 4, 1, 1, false, 4 * 6000.0));
  // At batch 16 a draft as costly as the model (a self-draft) never pays.
  EXPECT_FALSE(speculation_pays(flat, 4.0, 4, 16, 16, true, 4 * 10800.0));
}

// filters/repeated_call_guard: a tool call that repeats an earlier one of the same reply ends the
// reply, the repeat dropped; the first call streams as written, later ones arrive whole; text cut
// into pieces anywhere (one byte at a time too) gives the same output.
#include "actors/streamer/filters/repeated_call_guard.hpp"

#include <gtest/gtest.h>

#include "actors/request.hpp"
#include "tests/support/filter_feed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::bytes_of;
using troupe::test::run_result;

namespace {

run_result feed(const std::vector<std::string>& pieces) {
  auto f = filters::make_repeated_call_guard("<tool_call>", "</tool_call>");
  return test::feed(*f, pieces);
}

const std::string paris = "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
const std::string rome = "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";

}  // namespace

TEST(repeated_call_guard, a_repeated_call_ends_the_reply_and_is_dropped) {
  for (const auto& pieces : {std::vector<std::string>{paris + "\n" + paris + "\n" + rome}, bytes_of(paris + "\n" + paris + "\n" + rome)}) {
    auto r = feed(pieces);
    EXPECT_TRUE(r.end.end);
    EXPECT_EQ(r.end.finish_reason, finish::stop);
    EXPECT_EQ(r.text, paris + "\n");
  }
  // Whitespace around the body does not make a call different.
  auto r = feed({paris, "\n<tool_call>{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"});
  EXPECT_TRUE(r.end.end);
  EXPECT_EQ(r.text, paris + "\n");
}

TEST(repeated_call_guard, different_calls_and_text_pass) {
  const std::string all = "Let me check. " + paris + "\n" + rome + "\nDone <tool";
  for (const auto& pieces : {std::vector<std::string>{all}, bytes_of(all)}) {
    auto r = feed(pieces);
    EXPECT_FALSE(r.end.end);
    EXPECT_EQ(r.text, all);  // the cut opening marker at the end comes out when the stream ends
  }
}

TEST(repeated_call_guard, the_first_call_streams_later_ones_come_whole) {
  auto r = feed(bytes_of(paris + "\n" + rome));
  // The first call's bytes come out as they arrive (but for a possible closing marker's start).
  size_t piece_outs = 0;
  for (size_t i = 0; i < paris.size(); ++i) piece_outs += r.outs[i].empty() ? 0 : 1;
  EXPECT_GT(piece_outs, paris.size() / 2);
  // The second one is held until it closes, then goes out at once.
  for (size_t i = paris.size() + 1; i + 1 < r.outs.size(); ++i) EXPECT_EQ(r.outs[i], "") << i;
  EXPECT_EQ(r.outs.back(), rome);
  EXPECT_EQ(r.text, paris + "\n" + rome);
}

TEST(repeated_call_guard, a_call_cut_short_goes_out_as_cut) {
  const std::string cut = paris + "\n<tool_call>\n{\"name\": \"w\", \"argu";
  auto r = feed(bytes_of(cut));
  EXPECT_FALSE(r.end.end);
  EXPECT_EQ(r.text, cut);
}

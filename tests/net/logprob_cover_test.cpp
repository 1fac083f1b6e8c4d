// net/logprob_cover: a token's logprob entry goes out with the text that completes its bytes,
// and a stop string's cut inside a token cuts its entry; a stream's text waits for its entry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/logprob_cover.hpp"

using troupe::net::logprob_cover;
using troupe::net::token_logprob_entry;

namespace {

token_logprob_entry entry(std::string piece, float logprob) { return {std::move(piece), logprob, {}}; }

std::string pieces(const std::vector<token_logprob_entry>& es) {
  std::string s;
  for (const auto& e : es) s += e.piece + "|";
  return s;
}

}  // namespace

TEST(logprob_cover, entries_go_out_with_the_text_that_completes_them) {
  logprob_cover c;
  c.add(entry("He", -0.5f));
  EXPECT_EQ(pieces(c.release("He")), "He|");
  // " blue": the streamer releases " bl" and holds "ue" (it might start a stop string).
  c.add(entry(" blue", -1.0f));
  EXPECT_EQ(pieces(c.release(" bl")), "");
  c.add(entry(",", -2.0f));
  EXPECT_EQ(pieces(c.release("")), "");
  // No stop string after all: "ue," comes out with the next token's text, and both entries.
  auto out = c.release("ue,");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].piece, " blue");
  EXPECT_FLOAT_EQ(out[0].logprob, -1.0f);
  EXPECT_EQ(out[1].piece, ",");
  // Text completing more than one held token at once (a UTF-8 character split over two).
  c.add(entry("\xC3", -0.25f));
  EXPECT_EQ(pieces(c.release("")), "");
  c.add(entry("\xA9!", -0.75f));
  EXPECT_EQ(pieces(c.release("\xC3\xA9!")), "\xC3|\xA9!|");
  EXPECT_EQ(pieces(c.finish("")), "");
}

TEST(logprob_cover, a_cut_inside_a_token_cuts_its_entry) {
  // Stop string "ue,\n": " bl" was released, then the stop matched; the answer ends in " bl".
  logprob_cover c;
  c.add(entry(" blue", -1.0f));
  EXPECT_EQ(pieces(c.release(" bl")), "");
  c.add(entry(",", -2.0f));
  c.add(entry("\n", -3.0f));
  auto cut = c.finish("");
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].piece, " bl");
  EXPECT_FLOAT_EQ(cut[0].logprob, -1.0f);

  // Stop string "Ber" inside " Berlin": only " " is released, at the end.
  c.add(entry(" Berlin", -0.5f));
  EXPECT_EQ(pieces(c.release("")), "");
  auto ber = c.finish(" ");
  ASSERT_EQ(ber.size(), 1u);
  EXPECT_EQ(ber[0].piece, " ");

  // A cut at a token boundary drops the tokens past it whole; nothing is held afterwards.
  c.add(entry("In", -0.1f));
  c.add(entry(" the", -0.2f));
  EXPECT_EQ(pieces(c.release("")), "");
  EXPECT_EQ(pieces(c.finish("In")), "In|");
  EXPECT_EQ(pieces(c.finish("")), "");
}

TEST(logprob_cover, text_that_is_not_the_tokens_bytes_takes_the_held_entries_along) {
  logprob_cover c;
  // A special token writes no text; the next token's text brings both entries.
  c.add(entry("<|im_end|>", -0.5f));
  EXPECT_EQ(pieces(c.release("")), "");
  c.add(entry("\n", -1.0f));
  EXPECT_EQ(pieces(c.release("\n")), "<|im_end|>|\n|");
  // A leading space the detokenizer dropped.
  c.add(entry(" Hello", -0.25f));
  EXPECT_EQ(pieces(c.release("Hello")), " Hello|");
  // Bytes that are not UTF-8, written as U+FFFD.
  c.add(entry("\xC3", -0.75f));
  EXPECT_EQ(pieces(c.release("\xEF\xBF\xBD")), "\xC3|");
  // And the cover goes on as before afterwards.
  c.add(entry(" blue", -1.0f));
  EXPECT_EQ(pieces(c.release(" bl")), "");
  auto cut = c.finish("");
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].piece, " bl");
}


TEST(logprob_cover, aligned_calls_hold_text_that_starts_a_token_until_its_entry_goes) {
  // Stop string "ari": the streamer releases " P" of " Paris", then the stop matches. A stream
  // must not send " P" in one chunk and its entry in the next.
  logprob_cover c;
  c.add(entry(" is", -0.1f));
  auto a = c.release_aligned(" is");
  EXPECT_EQ(a.text, " is");
  EXPECT_EQ(pieces(a.entries), " is|");
  c.add(entry(" Paris", -0.5f));
  a = c.release_aligned(" P");
  EXPECT_EQ(a.text, "");
  EXPECT_EQ(pieces(a.entries), "");
  auto end = c.finish_aligned("");
  EXPECT_EQ(end.text, " P");
  EXPECT_EQ(pieces(end.entries), " P|");

  // No stop after all: the held bytes come out with the rest of the token and its entry.
  logprob_cover d;
  d.add(entry(" blue", -1.0f));
  EXPECT_EQ(d.release_aligned(" bl").text, "");
  d.add(entry(",", -2.0f));
  a = d.release_aligned("ue,");
  EXPECT_EQ(a.text, " blue,");
  EXPECT_EQ(pieces(a.entries), " blue|,|");
  end = d.finish_aligned("");
  EXPECT_EQ(end.text, "");
  EXPECT_TRUE(end.entries.empty());

  // Text that is not the tokens' bytes (U+FFFD for a broken character) goes at once, with the
  // entries held, as release gives them.
  logprob_cover f;
  f.add(entry("\xE2\x80", -1.0f));
  a = f.release_aligned("\xEF\xBF\xBD");
  EXPECT_EQ(a.text, "\xEF\xBF\xBD");
  EXPECT_EQ(a.entries.size(), 1u);
}

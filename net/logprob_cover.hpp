#pragma once
// Which tokens' logprobs go with a piece of released text. The streamer holds text back (a
// possible stop string, part of a UTF-8 character) and releases it later, sometimes only part
// of a token's bytes (" bl" of " blue" while "ue" might start a stop string). A token's logprob
// entry goes out with the text that completes its bytes, so the entries sent add up to the text
// sent; at the end, where a stop string cut the text inside a token, that token's entry goes out
// with only its kept bytes and tokens wholly past the cut are dropped (docs/protocol.md: the
// logprobs cover exactly the text returned). Where the text is not the tokens' bytes (a special
// token, which writes no text; a leading space the detokenizer drops; U+FFFD for bytes that are
// not UTF-8), the entries held go out with the text that comes, as they are.
//
// A stream sends text and entries in the same chunk: the `aligned` calls also hold back the
// released text that only starts a token (" P" of " Paris" while "aris" might be a stop string)
// until that token's entry goes out, so that no chunk brings text whose entry comes in a later
// one (docs/protocol.md: each chunk carries the logprobs of the tokens whose text it brings).
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "net/openai_codec.hpp"

namespace troupe::net {

class logprob_cover {
 public:
  // A generated token's entry, in order.
  void add(token_logprob_entry e) { held_.push_back(std::move(e)); }
  // The streamer released `text`: the entries whose bytes it completes.
  std::vector<token_logprob_entry> release(std::string_view text);
  // The last text of the answer: the entries it completes, and the one it ends inside (cut to
  // its kept bytes); nothing is held afterwards.
  std::vector<token_logprob_entry> finish(std::string_view text);

  struct aligned_piece {
    std::string text;                         // what to send now
    std::vector<token_logprob_entry> entries;  // the entries of exactly that text
  };
  // As release and finish, holding back text that only starts a token: the text held back
  // before comes out with its entry. What the assemblies use, streamed or not (a whole answer's
  // text is the same either way). Use one kind of call per cover.
  aligned_piece release_aligned(std::string_view text);
  aligned_piece finish_aligned(std::string_view text);

 private:
  std::deque<token_logprob_entry> held_;
  std::string released_;  // text released beyond the pieces of the entries given out: the start of held_'s first
  std::string withheld_;  // the aligned calls: released text not sent yet (released_'s bytes)
};

}  // namespace troupe::net

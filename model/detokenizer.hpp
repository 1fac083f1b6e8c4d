#pragma once
// Streaming token ids -> text. A token may end in the middle of a UTF-8 sequence (byte-fallback
// tokens, byte-level pieces of an emoji or a CJK character), so bytes are held back until the
// sequence completes: every string push() returns is valid UTF-8 on its own.
#include <cstdint>
#include <optional>
#include <string>

#include "model/tokenizer.hpp"

namespace troupe::model {

class detokenizer {
 public:
  struct options {
    bool render_special = false;  // show control tokens' text (e.g. "<|im_end|>")
    // Drop the one leading space of the first non-empty piece: the space a SentencePiece
    // vocabulary adds in front of the text. Defaults to tokenizer::add_space_prefix().
    std::optional<bool> strip_leading_space;
  };

  explicit detokenizer(tokenizer tok);
  detokenizer(tokenizer tok, options opt);

  // The text that became complete with this token (often the whole piece, sometimes "").
  std::string push(int32_t id);
  // What is still held back, with each incomplete or ill-formed sequence as U+FFFD; call at the
  // end of the stream. The detokenizer then starts afresh.
  std::string flush();
  // Forgets held-back bytes and the leading-space state, for a new stream.
  void reset();

  size_t pending_bytes() const { return pending_.size(); }

 private:
  // Moves the complete prefix of pending_ to the result; ill-formed bytes become U+FFFD.
  std::string drain(bool final);

  tokenizer tok_;
  bool render_special_;
  bool strip_space_default_;
  bool strip_space_;
  std::string pending_;
};

}  // namespace troupe::model

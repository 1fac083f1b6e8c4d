#pragma once
// Text in and out of the pipeline: admission renders chat messages and tokenizes prompts; the
// streamer turns generated tokens back into text, one token at a time. One immutable codec is
// shared by every actor (all methods may be called from many threads); each stream gets its own
// incremental decoder.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/request.hpp"
#include "common/result.hpp"
#include "structured/constraint.hpp"
#include "structured/tool_calls.hpp"

namespace troupe::model {
class gguf_file;
}

namespace troupe::actors {

class incremental_decoder {
 public:
  virtual ~incremental_decoder() = default;
  // The text that became complete with this token (valid UTF-8; may be empty).
  virtual std::string push(int32_t token) = 0;
  // Whatever is held back, at the end of the stream.
  virtual std::string flush() = 0;
};

class text_codec {
 public:
  virtual ~text_codec() = default;
  // A raw prompt: the model's default for a leading bos, special-token text parsed (a raw
  // prompt is the caller's own template: /v1/completions' `prompt` may spell <|im_start|>).
  virtual result<std::vector<int32_t>> encode_prompt(const std::string& text) const = 0;
  // A conversation, rendered with the model's chat template and an assistant turn opened.
  // Special tokens come only from the template: the messages' texts are plain text (unless
  // text_codec_options::parse_special_in_messages).
  virtual result<std::vector<int32_t>> encode_chat(const std::vector<chat_message>& messages) const = 0;
  // Text as it is, for /tokenize: a leading bos only with `add_special` (and where the model's
  // default wants one); special-token text read as those tokens with `parse_special`.
  virtual result<std::vector<int32_t>> encode_text(const std::string& text, bool add_special,
                                                   bool parse_special) const = 0;
  // The bytes one token stands for, special tokens spelled out (may be part of a UTF-8
  // sequence); "" for an id outside the vocabulary.
  virtual std::string token_piece(int32_t id) const = 0;
  virtual std::unique_ptr<incremental_decoder> decoder() const = 0;
  // Tokens that end generation.
  virtual std::vector<int32_t> eog_tokens() const = 0;
  virtual int32_t n_vocab() const = 0;
  // A structured-output constraint compiled against this vocabulary, once per spec (a bounded
  // cache shared by admission, which refuses a bad one by name, and the executor). Errors name
  // the problem.
  virtual result<std::shared_ptr<const structured::compiled_constraint>> compile_constraint(
      const structured::constraint_spec& spec) const = 0;
  // How the chat template writes tool calls (from its family).
  virtual structured::tool_format tool_format() const = 0;
};

struct text_codec_options {
  // Read special-token text inside chat messages as those tokens ("<|im_start|>" in a user's
  // message becomes the role marker, so a user can forge a system turn). Off: only the chat
  // template writes special tokens; a trusted client that builds its own turns may turn it on.
  bool parse_special_in_messages = false;
};

// The model's own tokenizer, detokenizer and chat template, read from its GGUF metadata.
result<std::shared_ptr<const text_codec>> make_gguf_codec(const model::gguf_file& file, text_codec_options opts = {});

// For tests and fakes: token i < 256 is the byte i; tokens >= 256 are "<i>" except `eog`, which
// ends generation and prints nothing. Chat messages render as "role: content\n" lines.
std::shared_ptr<const text_codec> make_byte_codec(int32_t n_vocab = 320, int32_t eog = 256);

}  // namespace troupe::actors

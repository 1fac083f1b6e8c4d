#pragma once
// Text <-> token ids, from the vocabulary a GGUF file carries: byte-level BPE (`gpt2` model,
// with the pre-tokenizer `tokenizer.ggml.pre` names) and SentencePiece BPE (`llama` model, with
// scores and <0xNN> byte fallback). Reproduces llama.cpp's tokenizer test vectors exactly.
//
// A tokenizer is immutable once built; copies share the vocabulary and are cheap, and every
// method may be called from many threads at once.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace troupe::model {

class gguf_file;

namespace detail {
struct tokenizer_data;
}

// tokenizer.ggml.token_type values.
enum class token_type : uint8_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,       // <s>, <|im_end|>: only parsed from text when asked, hidden when decoding
  user_defined = 4,  // always parsed from text as one token, always shown
  unused = 5,
  byte = 6,          // SentencePiece byte fallback, <0xNN>
};

enum class tokenizer_kind { bpe, spm };

class tokenizer {
 public:
  // Reads tokenizer.ggml.* (no tensors needed). Errors name the missing or malformed key, an
  // unsupported tokenizer model or pre-tokenizer.
  static result<tokenizer> from_gguf(const gguf_file& file);

  // `add_bos`: prepend bos() (when the vocabulary has one). `parse_special`: text spelling a
  // control token (e.g. "<|im_start|>") becomes that token; otherwise it is tokenized as plain
  // text. User-defined tokens are always matched, as in llama.cpp and Hugging Face tokenizers.
  // Ill-formed UTF-8 is tokenized the way llama.cpp does it: SentencePiece spells the bad
  // bytes with byte tokens; byte-level BPE reads each bad byte as U+FFFD (llama.cpp decodes
  // overlong forms and surrogates leniently instead; only there do the two differ). Use
  // encode_checked to reject such input.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = false) const;
  // Same, but ill-formed UTF-8 is an error naming the byte offset of the first bad byte.
  result<std::vector<int32_t>> encode_checked(std::string_view text, bool add_bos = false,
                                              bool parse_special = false) const;
  // Byte ranges [first, second) of a text, ascending and not overlapping.
  using spans = std::vector<std::pair<size_t, size_t>>;
  // Like encode_checked with parse_special, but a control token is read from text only where
  // its whole spelling lies inside one of `special_spans`; elsewhere it is plain text. A chat
  // prompt passes its template's own text as the spans, so that a message cannot spell a role
  // marker. Text on both sides of a span's edge is tokenized as one, as encode() would.
  result<std::vector<int32_t>> encode_checked(std::string_view text, bool add_bos,
                                              const spans& special_spans) const;

  // The bytes a token stands for (may be part of a UTF-8 sequence: see detokenizer). Control
  // and unknown tokens give "" unless `render_special`; an out-of-range id gives "".
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // The concatenated pieces, with the one leading space a SentencePiece vocabulary's space
  // prefix added removed from the first non-empty piece. May end in an incomplete sequence.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const;
  const std::string& token_text(int32_t id) const;  // as stored in the vocabulary
  token_type type(int32_t id) const;
  int32_t find_token(std::string_view text) const;  // exact vocabulary entry, or -1

  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  int32_t unk() const;
  int32_t pad() const;
  // End of generation: eos, eot/eom, and tokens llama.cpp recognises by name
  // (<|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...).
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;

  bool add_bos_default() const;   // tokenizer.ggml.add_bos_token, or the model's default
  bool add_space_prefix() const;  // tokenizer.ggml.add_space_prefix, or the model's default
  tokenizer_kind kind() const;
  const std::string& model_name() const;  // tokenizer.ggml.model
  const std::string& pre_name() const;    // canonical pre-tokenizer name ("" for SPM)

 private:
  explicit tokenizer(std::shared_ptr<const detail::tokenizer_data> d) : d_(std::move(d)) {}
  // parse_special, limited to `special_spans` when not null.
  std::vector<int32_t> encode_impl(std::string_view text, bool add_bos, bool parse_special,
                                   const spans* special_spans) const;
  std::shared_ptr<const detail::tokenizer_data> d_;
};

}  // namespace troupe::model

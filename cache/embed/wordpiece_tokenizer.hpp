#pragma once
// BERT's WordPiece tokenizer (uncased): basic tokenization (bert_text.hpp), then each word split
// greedily into the longest vocabulary pieces, continuation pieces spelled "##piece"; a word
// that cannot be split, or is longer than 100 characters, becomes [UNK]. The vocabulary comes
// from a vocab.txt (one token per line, the line number is the id) or from a GGUF file's
// tokenizer.ggml.tokens, which llama.cpp's converter spells differently (see from_gguf_tokens).
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"

namespace troupe::model {
class gguf_file;
}

namespace troupe::cache {

class wordpiece_tokenizer {
 public:
  static result<wordpiece_tokenizer> from_vocab_file(const std::string& path);
  // Tokens in id order, spelled as in vocab.txt.
  static result<wordpiece_tokenizer> from_tokens(std::vector<std::string> tokens);
  // llama.cpp writes a word-initial piece as "\u2581piece" and a continuation as "piece"; this
  // turns them back into "piece" and "##piece" ([CLS]-style specials stay as they are).
  static result<wordpiece_tokenizer> from_gguf(const model::gguf_file& file);

  // The pieces of text, without [CLS] / [SEP].
  std::vector<int32_t> encode(std::string_view text) const;
  // [CLS] pieces [SEP], cut to at most max_tokens (>= 2) ids in all, as the embedder takes them.
  std::vector<int32_t> encode_for_model(std::string_view text, size_t max_tokens) const;

  size_t vocab_size() const { return tokens_.size(); }
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  int32_t id_of(const std::string& token) const;  // -1 when absent
  int32_t cls_id() const { return cls_; }
  int32_t sep_id() const { return sep_; }
  int32_t unk_id() const { return unk_; }

 private:
  wordpiece_tokenizer() = default;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  size_t longest_ = 0;  // bytes of the longest piece (after any "##"): bounds the greedy search
  int32_t cls_ = -1, sep_ = -1, unk_ = -1;
};

}  // namespace troupe::cache

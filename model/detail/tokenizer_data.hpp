#pragma once
// The immutable state behind a tokenizer, built once by tokenizer::from_gguf and shared by its
// copies. Internal to model/tokenizer.cpp and the encoders in detail/.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/pretokenizer.hpp"
#include "model/tokenizer.hpp"

namespace troupe::model::detail {

// BPE merge ranks. Almost every merge joins two vocabulary tokens, so it is keyed by the pair of
// ids; the rare merge naming text that is not a token falls back to a text key.
struct bpe_ranks {
  std::unordered_map<uint64_t, int32_t> by_ids;
  std::unordered_map<std::string, int32_t> by_text;

  static uint64_t id_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  static std::string text_key(std::string_view left, std::string_view right) {
    std::string k = std::to_string(left.size());
    k += ':';
    k.append(left);
    k.append(right);
    return k;
  }
};

struct tokenizer_data {
  tokenizer_data() = default;
  tokenizer_data(const tokenizer_data&) = delete;  // `ids` points into `text`
  tokenizer_data& operator=(const tokenizer_data&) = delete;

  tokenizer_kind kind = tokenizer_kind::bpe;
  std::string model_name;  // tokenizer.ggml.model

  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<token_type> type;
  // Keys view `text`, which never changes size once loaded: lookups need no allocation.
  std::unordered_map<std::string_view, int32_t> ids;
  std::vector<std::string> piece;  // bytes per token, control tokens included

  // Control, user-defined and unknown tokens, longest text first: the order llama.cpp splits
  // them out of raw text in.
  std::vector<int32_t> special;

  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  std::vector<int32_t> eog;  // sorted
  bool add_bos = false;
  bool add_space_prefix = false;

  // BPE
  std::optional<pretokenizer> pre;
  bool ignore_merges = false;
  bpe_ranks ranks;

  // SentencePiece: the byte-fallback token of each byte (unk when the vocabulary lacks it).
  std::array<int32_t, 256> byte_token{};

  int32_t find(std::string_view s) const {
    auto it = ids.find(s);
    return it == ids.end() ? -1 : it->second;
  }
};

}  // namespace troupe::model::detail

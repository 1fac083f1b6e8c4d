#pragma once
// The pre-tokenizer of byte-level BPE vocabularies: splits text into the words that BPE merges
// run within, with the regexes that `tokenizer.ggml.pre` names (PCRE2, UTF + UCP, JIT).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace troupe::model {

// What a `tokenizer.ggml.pre` name means, as llama.cpp reads it.
struct pretokenizer_config {
  std::string name;                   // canonical name, e.g. "gpt2", "llama3", "smollm"
  std::vector<std::string> patterns;  // applied in order; each splits the pieces of the last
  bool ignore_merges = false;         // a word that is itself a token skips the merges (Llama 3)
  bool add_bos = false;               // default for tokenizer.ggml.add_bos_token when absent
};

// Known names: "default" (or empty), "gpt-2"/"gpt2" (and phi-2, mpt, olmo, ...),
// "llama3"/"llama-bpe"/"llama-v3", "qwen2" (and stablelm2, megrez, deepseek-r1-qwen),
// "starcoder"/"smollm"/"refact"/"command-r"/"codeshell"/"exaone"/"minerva-7b".
result<pretokenizer_config> pretokenizer_config_for(std::string_view pre_name);

class pretokenizer {
 public:
  static result<pretokenizer> compile(const pretokenizer_config& config);

  // Splits valid UTF-8 `text` (callers repair it first: PCRE2 runs without its UTF check).
  // The pieces cover the text exactly and in order; like llama.cpp, text no pattern matches
  // stays as pieces of its own rather than being dropped.
  std::vector<std::string_view> split(std::string_view text) const;

  const pretokenizer_config& config() const { return config_; }

 private:
  struct regex;
  pretokenizer_config config_;
  std::vector<std::shared_ptr<const regex>> regexes_;  // immutable, shared by copies
};

}  // namespace troupe::model

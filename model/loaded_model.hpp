#pragma once
// Everything needed to serve one GGUF file: weights, tokenizer and chat template, loaded
// together with one clear error when the file is missing or unusable.
#include <memory>
#include <string>
#include <vector>

#include "model/chat_template.hpp"
#include "model/llama_model.hpp"
#include "common/result.hpp"
#include "model/tokenizer.hpp"

namespace troupe::model {

struct loaded_model {
  std::string path;
  std::string id;                    // file name without .gguf, used as the model id
  std::shared_ptr<llama_model> weights;
  tokenizer vocab;
  chat_template chat;

  static result<std::shared_ptr<loaded_model>> load(const std::string& path);

  // Renders messages with the chat template and tokenizes them (special tokens parsed).
  result<std::vector<int32_t>> encode_chat(const std::vector<chat_message>& messages) const;
  // Tokenizes a plain prompt (BOS as the model says; special tokens not parsed). Invalid UTF-8
  // and an empty prompt are errors.
  result<std::vector<int32_t>> encode_prompt(const std::string& text) const;
};

// The default model, relative to the repository root.
inline const char* default_model_path() { return "models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

}  // namespace troupe::model

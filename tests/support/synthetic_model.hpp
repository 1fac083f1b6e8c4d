#pragma once
// Builds tiny Llama-family GGUF models with random weights of any tensor type and a tiny
// byte-level BPE vocabulary, so that unit tests never need the real model file.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/ggml_type.hpp"
#include "model/gguf_reader.hpp"

namespace troupe::test {

struct synthetic_options {
  std::string arch = "llama";       // or "qwen2"
  int n_embd = 256;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 512;
  int n_ctx = 512;
  float rope_base = 10000.0f;
  model::ggml_type matrix_type = model::ggml_type::f32;   // attention / FFN matrices
  model::ggml_type embd_type = model::ggml_type::f32;     // token embedding (tied output head)
  bool tied_output = true;
  uint32_t seed = 42;
};

// The GGUF image; its vocabulary is the 256 GPT-2 byte tokens, a few merges and the specials
// <|endoftext|> (eos), <|im_start|>, <|im_end|>.
std::vector<uint8_t> make_synthetic_gguf(const synthetic_options& o);
std::shared_ptr<model::gguf_file> make_synthetic_file(const synthetic_options& o);

}  // namespace troupe::test

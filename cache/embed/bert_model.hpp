#pragma once
// A BERT encoder (Hugging Face BertModel layout) on the CPU, for sentence embedders: word +
// position + token-type embeddings and LayerNorm, then per layer bidirectional multi-head
// self-attention and an exact-GELU feed-forward, each followed by a residual LayerNorm (post-LN).
// Weights are read in place from a safetensors file (F32, F16 or BF16 matrices); the matrix
// products use the engine's batched matmul and thread pool. One sequence per call, no padding.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/embed/safetensors_reader.hpp"
#include "model/matmul.hpp"
#include "common/result.hpp"
#include "model/thread_pool.hpp"

namespace troupe::cache {

struct bert_config {
  int vocab_size = 0;
  int hidden = 0;
  int n_layers = 0;
  int n_heads = 0;
  int intermediate = 0;
  int max_positions = 0;
  int type_vocab_size = 0;
  float layer_norm_eps = 1e-12f;
};

// Reads a Hugging Face config.json; refuses what this encoder does not compute (another
// activation than exact GELU, relative position embeddings, a non-BERT model type).
result<bert_config> parse_bert_config(const std::string& json_text);

class bert_model {
 public:
  // Checks every tensor's presence and shape against cfg; keeps `file` alive. F32 weight
  // matrices are used as stored, or converted to matrix_type (f16, q8_0: less memory traffic
  // per forward, slightly less exact).
  static result<std::unique_ptr<bert_model>> load(std::shared_ptr<const safetensors_file> file, const bert_config& cfg,
                                                  model::ggml_type matrix_type = model::ggml_type::f32);

  // The last layer's hidden states, n_tok rows of hidden() floats, into `out`. Ids must be in
  // the vocabulary and 1 <= n_tok <= max_positions. Not reentrant (uses internal scratch).
  status forward(const int32_t* ids, int n_tok, std::vector<float>& out, model::thread_pool& pool);

  const bert_config& config() const { return cfg_; }

 private:
  struct layer {
    model::weight_view qkv, attn_out, ffn_in, ffn_out;
    const float *qkv_b, *attn_out_b, *ffn_in_b, *ffn_out_b;
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
  };
  bert_model() = default;

  void attention(const float* qkv, int n_tok, float* ctx, model::thread_pool& pool);

  bert_config cfg_;
  std::shared_ptr<const safetensors_file> file_;
  std::vector<std::vector<uint8_t>> owned_;  // fused Q|K|V matrices; copies of misaligned tensors
  const float *word_ = nullptr, *pos_ = nullptr, *type_ = nullptr, *emb_ln_w_ = nullptr, *emb_ln_b_ = nullptr;
  std::vector<layer> layers_;
  // Scratch, sized for the longest sequence seen so far.
  std::vector<float> qkv_, ctx_, tmp_, ffn_;
  std::vector<float> q_head_, v_head_t_, scores_, out_head_;  // attention, one head at a time
};

}  // namespace troupe::cache

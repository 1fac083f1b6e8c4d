#pragma once
// A Llama-family model loaded from GGUF: hyper-parameters from metadata and weight views into
// the memory-mapped file (no copies of the weights). Matrices of a type the matmul kernels lack
// (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K) are converted to Q8_0 copies the model owns when a backend that
// reads rows as they are asks for them (prepare_matmul_weights, model/weight_conversion.hpp); the
// fast order packs them straight from the file's bytes instead (model/matmul.hpp).
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/architecture.hpp"
#include "model/gguf_reader.hpp"
#include "model/matmul.hpp"
#include "common/result.hpp"

namespace troupe::model {

struct hparams {
  std::string arch;
  std::string name;             // general.name, for messages
  int n_vocab = 0;
  int n_ctx_train = 0;          // the context the model was trained for
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_rot = 0;                // dimensions RoPE rotates (usually head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  float rms_eps = 1e-5f;
  rope_style rope = rope_style::normal;
  bool qkv_bias = false;
  bool tied_output = false;     // output head shares token_embd
  int n_kv_dim() const { return n_head_kv * head_dim; }
  int n_q_dim() const { return n_head * head_dim; }
};

struct layer_weights {
  const float* attn_norm = nullptr;
  weight_view wq, wk, wv, wo;
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* ffn_norm = nullptr;
  weight_view w_gate, w_up, w_down;
};

class llama_model {
 public:
  // Reads hyper-parameters and checks every tensor's presence, type and shape; an error names
  // the key or tensor at fault.
  static result<std::shared_ptr<llama_model>> load(std::shared_ptr<gguf_file> file);
  static result<std::shared_ptr<llama_model>> load(const std::string& path);

  const hparams& params() const { return hp_; }
  const gguf_file& file() const { return *file_; }
  std::shared_ptr<gguf_file> file_ptr() const { return file_; }
  const weight_view& token_embd() const { return tok_embd_; }
  const weight_view& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  // Per-pair divisors of the rotary frequencies (the optional rope_freqs.weight, n_rot / 2
  // floats: Llama 3.1's long-context frequencies, applied as llama.cpp applies them); null when
  // the file has none.
  const float* rope_freq_factors() const { return rope_freqs_; }
  // The matrices as the file holds them (any supported type).
  const std::vector<layer_weights>& layers() const { return layers_; }
  // Makes the views matmul_layers() / matmul_output() give: every matrix of a type without
  // kernels converted to Q8_0 (once, for every backend; an error when the memory cannot be had).
  // Nothing to do, and no memory taken, for a model without such matrices.
  status prepare_matmul_weights() const;
  // After prepare_matmul_weights(): the matrices in types the kernels multiply as stored.
  const std::vector<layer_weights>& matmul_layers() const;
  const weight_view& matmul_output() const;
  // The bytes of the weights as the model computes with them: the file's tensors, with each
  // matrix of a type without kernels counted at its Q8_0 size (what a matmul reads).
  size_t weight_bytes() const;
  // The memory the Q8_0 copies take (0 when none were made).
  size_t converted_bytes() const { return converted_bytes_; }

 private:
  std::shared_ptr<gguf_file> file_;
  hparams hp_;
  weight_view tok_embd_;
  weight_view output_;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<layer_weights> layers_;
  static std::vector<weight_view*> matrices(std::vector<layer_weights>& layers, weight_view& output);
  size_t converted_source_bytes_ = 0;  // the file's bytes of the matrices without kernels
  size_t q8_0_equivalent_bytes_ = 0;   // theirs as Q8_0
  // prepare_matmul_weights' work, once.
  mutable std::once_flag convert_once_;
  mutable std::vector<layer_weights> conv_layers_;
  mutable weight_view conv_output_;
  mutable std::shared_ptr<uint8_t> converted_;  // the Q8_0 copies conv_* point into
  mutable size_t converted_bytes_ = 0;
  mutable std::string convert_error_;
};

}  // namespace troupe::model

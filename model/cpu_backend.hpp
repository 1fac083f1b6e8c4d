#pragma once
// The CPU backend: Troupe's reference and the default without a GPU. Real math on the real
// (quantized) weights, paged fp16 KV memory allocated once, batched steps in which each weight
// matrix is read once for all tokens.
#include <atomic>
#include <memory>
#include <vector>

#include "model/backend.hpp"
#include "model/paged_attention.hpp"
#include "model/step_profile.hpp"
#include "model/thread_pool.hpp"

namespace troupe::model {

class cpu_backend final : public backend {
 public:
  static result<std::unique_ptr<backend>> create(std::shared_ptr<llama_model> m, const backend_options& o);

  std::string name() const override { return "cpu"; }
  // The matmul order in use: `fast` only where it was asked for and this CPU has its kernels.
  matmul_order order() const { return order_; }
  const hparams& params() const override { return model_->params(); }
  int32_t n_blocks() const override { return n_blocks_; }
  int32_t block_size() const override { return block_size_; }
  size_t kv_bytes_per_token() const override;
  result<batch_logits> forward(const batch& b) override;
  void for_each_row(int64_t n, const std::function<void(int64_t i)>& fn) override;

  thread_pool& pool() { return pool_; }
  // The fast order's packed weights: their bytes, and how many of them 2 MiB pages back now.
  size_t packed_size() const { return packed_size_; }
  size_t packed_huge_page_bytes() const;
  // Times every following pure decode step (one token per sequence) into p, phase by phase;
  // nullptr stops. p must outlive its use.
  void set_profile(step_profile* p) { profile_ = p; }

 private:
  cpu_backend(std::shared_ptr<llama_model> m, const backend_options& o, int32_t n_blocks);
  kv_layer_view layer_view(int layer);
  void pack_matrices();

  std::shared_ptr<llama_model> model_;
  thread_pool pool_;
  int32_t block_size_;
  int32_t n_blocks_;
  kv_dtype kv_type_;
  matmul_order order_ = matmul_order::llama_cpp;
  bool k_by_column_ = false;  // K memory's layout (kv_k_by_column): for the fast kernel
  // The weights the step multiplies with: the model's views, pointing at packed copies in the
  // fast order (packed_ owns them: one allocation in 2 MiB pages, model/huge_pages.hpp).
  std::vector<layer_weights> layers_;
  weight_view output_;
  std::shared_ptr<uint8_t> packed_;
  size_t packed_size_ = 0;
  std::shared_ptr<uint8_t> k_cache_, v_cache_;  // [layer][block][kv_head][slot][head_dim] of kv_type_ (K by column: kv_layer_view)
  std::vector<float> k_scale_, v_scale_;    // q8: one per row, [layer][block][kv_head][slot]

  step_profile* profile_ = nullptr;

  // Step scratch, grown on demand and reused.
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, rope_cos_, rope_sin_, out_rows_;
  // The step's attention tasks (plan_attention): one per (token, KV head), or one per part of a
  // split query (paged_attention.hpp's split_attention), the same for every layer.
  struct attention_task {
    int32_t t, g;
    int32_t part;   // of a split query; -1: all its parts
    int32_t split;  // index in attn_splits_, or -1: the whole query in one task
  };
  struct split_query {
    int64_t first_part;  // its parts' place in attn_parts_ / attn_stats_
    attention_split split;
  };
  void plan_attention(int64_t T, const std::vector<int32_t>& tok_pos, const kv_layer_view& kv);
  std::vector<attention_task> attn_tasks_;
  std::vector<split_query> attn_splits_;
  std::vector<float> attn_parts_, attn_stats_;  // each part's outputs (group x head_dim) and (max, sum) per head
  std::unique_ptr<std::atomic<int>[]> attn_pending_;  // per split query: parts not yet done
  size_t attn_pending_size_ = 0;
};

}  // namespace troupe::model

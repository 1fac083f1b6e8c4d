#pragma once
// The `cuda` backend: the model/backend.hpp interface on one CUDA device. Weights are
// dequantized on the host by the engine's own code and uploaded once as fp16; projections are
// cuBLAS fp16 GEMMs with fp32 accumulation; norm, RoPE, SwiGLU, paged attention and KV writes
// are the kernels of cuda_kernels.cuh around gpu/kernel_math.hpp. KV memory is device blocks in
// the CPU backend's layout, addressed by the scheduler's block tables. Decode steps (one token per
// sequence) replay a CUDA graph captured per batch-size bucket; prefill runs eagerly.
//
// This header has no CUDA include, so host code (the check, tests) uses it with a plain compiler.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/backend.hpp"
#include "model/sampler.hpp"

namespace troupe::gpu {

struct cuda_options {
  int device = 0;
  // Replay captured CUDA graphs for decode steps. The registered "cuda" factory reads
  // TROUPE_CUDA_GRAPHS (0 turns them off) until the config schema carries the switch.
  bool graphs = true;
  // GEMM inputs as fp16 hi + lo pairs (math::split_half): f32-accurate activations, as the cpu
  // backend computes, for twice the GEMM columns. Off: plain fp16 activations (faster prefill,
  // greedy tokens of near-tied logits may differ from cpu). TROUPE_CUDA_SPLIT=0 turns it off
  // in the registered factory.
  bool split_activations = true;
};

// Where the time of the last step went.
struct cuda_step_timing {
  double wall_ms = 0.0;     // forward() from entry to return
  double device_ms = 0.0;   // between events around the device work (kernels, GEMMs, copies)
  bool graph = false;       // the step replayed a captured graph
  int bucket = 0;           // its batch-size bucket (graph steps)
};

class cuda_backend : public model::backend {
 public:
  // Fails with "no CUDA device: <reason>" where the runtime sees none.
  static result<std::unique_ptr<cuda_backend>> create(std::shared_ptr<model::llama_model> m,
                                                      const model::backend_options& o, const cuda_options& c);
  ~cuda_backend() override;

  std::string name() const override { return "cuda"; }
  const model::hparams& params() const override;
  int32_t n_blocks() const override;
  int32_t block_size() const override;
  size_t kv_bytes_per_token() const override;
  result<model::batch_logits> forward(const model::batch& b) override;
  // Device sampling for the executor: greedy, or temperature with top_k in 1..64 and top_p; the
  // step's logits stay on the device and only ids and logprobs are copied back.
  bool can_sample(const model::sampling_params& p) const override;
  result<std::vector<model::token_logprob>> forward_sampled(const model::batch& b,
                                                            const std::vector<model::row_sampling>& rows) override;

  void set_graphs(bool on);
  // Empty unless a graph capture failed; graphs are then off (decode runs eagerly) until
  // set_graphs(true) tries again.
  const std::string& graph_error() const;
  const cuda_step_timing& last_timing() const;
  // Greedy tokens and their logprobs for the rows of the last forward(), chosen on the device
  // (only ids and logprobs cross the bus).
  result<std::vector<model::token_logprob>> greedy_last();
  // Samples the rows of the last forward() on the device, one sampling_params per row: greedy
  // (temperature 0) or temperature with top_k in 1..64 and top_p, drawn by (seed, n_generated)
  // as model::sample_token does. Penalties, min_p, logprob alternatives and top_k outside 1..64
  // are not done on the device: an error says so (sample on the host from the logits instead).
  // A row without a finite logit comes back as token -1.
  result<std::vector<model::token_logprob>> sample_last(const std::vector<model::sampling_params>& p,
                                                       const std::vector<int64_t>& n_generated);

  struct impl;

 private:
  explicit cuda_backend(std::unique_ptr<impl> p);
  // forward(); with copy_logits false the logits stay on the device (for sample_last).
  result<model::batch_logits> run_step(const model::batch& b, bool copy_logits);
  std::unique_ptr<impl> impl_;
};

// The factory registered as "cuda" (options from cuda_options defaults and TROUPE_CUDA_GRAPHS).
model::backend_factory cuda_backend_factory();
// Registers it as "cuda" (normally in model::backend_registry()). Called explicitly by the programs
// that link troupe_gpu (troupe's main, the GPU check, gpu_tests) before they make a backend; an
// error when the name is taken.
status add_cuda_backend(named_registry<model::backend_factory>& r);

// Decode batch-size buckets for graphs: 1, 2, 4, ..., 256. Returns 0 above 256.
int decode_bucket(int n_seqs);

}  // namespace troupe::gpu

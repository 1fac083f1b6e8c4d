#pragma once
// The backend interface: one call runs one engine step for many sequences, mixing prompt
// chunks and single-token decodes. Inputs and outputs are plain values; the KV memory lives in
// the backend and is addressed through the block tables that the scheduler's kv_manager owns.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/named_registry.hpp"
#include "common/result.hpp"
#include "model/llama_model.hpp"
#include "model/sampler.hpp"

namespace troupe::model {

struct batch_sequence {
  uint64_t seq_id = 0;
  std::vector<int32_t> tokens;        // tokens fed this step (a prompt chunk, or one decode token)
  int32_t n_past = 0;                 // tokens of this sequence already in KV memory
  std::vector<int32_t> block_table;   // physical blocks covering n_past + tokens.size() positions
  bool want_logits = true;            // logits of the last n_logits tokens are returned
  // How many positions' logits, the last ones of `tokens` in order (with want_logits): a
  // speculative step verifies a proposal from the logits at every proposed position.
  int32_t n_logits = 1;
  // The length of the sequence's prompt (0: not said). Positions inside a prompt of 2 or more
  // tokens sum their attention in the order llama.cpp uses for a prompt batch, the others in
  // its order for a decoded token: a position's arithmetic depends on what it is, never on how
  // the steps were cut (chunked prefill, preemption, batching), and matches llama.cpp's.
  int32_t n_prompt = 0;
};

struct batch {
  std::vector<batch_sequence> seqs;
  int32_t n_tokens() const;
};

// Logits for the sequences that asked for them, in batch order: n_logits rows per sequence, in
// position order (seq_ids names each row's sequence, so a sequence may appear several times).
struct batch_logits {
  int32_t n_vocab = 0;
  std::vector<uint64_t> seq_ids;
  std::vector<float> data;            // seq_ids.size() rows of n_vocab
  const float* row(size_t i) const { return data.data() + i * static_cast<size_t>(n_vocab); }
};

// How one logits row of a step is to be sampled, for backends that sample where the logits are.
struct row_sampling {
  sampling_params params;
  int64_t n_generated = 0;  // tokens the sequence has generated: the draw's counter
};

struct backend_options {
  int n_threads = 0;                  // 0: all cores
  int32_t block_size = 16;            // tokens per KV block
  int64_t kv_bytes = 256ll << 20;     // KV memory budget, allocated once at start
  bool kv_f32 = false;                // K/V in f32 instead of fp16 (twice the memory; bit-closer to f32 references)
  bool kv_q8 = false;                 // cpu: K/V as int8 rows with a scale each (~half of fp16; AVX2 or AVX-512)
  bool cuda_graphs = true;            // cuda: replay decode steps as CUDA graphs per batch-size bucket
  matmul_order matmul = matmul_order::llama_cpp;  // cpu: quantized matmul summation order (see matmul.hpp)
};

class backend {
 public:
  virtual ~backend() = default;
  virtual std::string name() const = 0;
  virtual const hparams& params() const = 0;
  virtual int32_t n_blocks() const = 0;
  virtual int32_t block_size() const = 0;
  virtual size_t kv_bytes_per_token() const = 0;
  // Runs one step. Errors (a block table too short, a position past the context, a token id
  // out of range) come back as values and leave the KV memory of other sequences intact.
  virtual result<batch_logits> forward(const batch& b) = 0;

  // Sampling in the backend, so that only token ids and logprobs leave it (the cuda backend:
  // on the device). can_sample says whether a row with these parameters can be sampled there
  // (default: none); forward_sampled runs the step and samples each row that wants logits, one
  // row_sampling per such row in batch order, as model::sample_token would.
  virtual bool can_sample(const sampling_params&) const { return false; }
  virtual result<std::vector<token_logprob>> forward_sampled(const batch&, const std::vector<row_sampling>&) {
    return make_error(name() + " backend does not sample: use forward()");
  }

  // Runs fn(i) once for every i in [0, n) on the backend's host threads and returns when all are
  // done: host work on a step's rows, such as sampling them (default: on the caller, in order;
  // cpu: spread over its thread pool, which is idle between steps). Not while forward() runs;
  // fn must not throw.
  virtual void for_each_row(int64_t n, const std::function<void(int64_t i)>& fn) {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
  // Samples a step's n rows with sample(i): over for_each_row when two or more of them cost more
  // than an argmax (`costly`, see sampling_params::costly), else on the caller, in order (the
  // hand-off would cost more than it saves).
  void sample_rows(int64_t n, int costly, const std::function<void(int64_t i)>& sample) {
    if (costly >= 2) return for_each_row(n, sample);
    for (int64_t i = 0; i < n; ++i) sample(i);
  }
};

using backend_factory =
    std::function<result<std::unique_ptr<backend>>(std::shared_ptr<llama_model>, const backend_options&)>;

// The process-wide registry of backends, holding "cpu" from its first use. The cuda backend
// lives in another library (gpu/): the program that links it adds it
// (gpu::add_cuda_backend(backend_registry())) before it makes a backend.
named_registry<backend_factory>& backend_registry();
// backend_registry().make(name, m, o): the backend, or an error listing the known names.
result<std::unique_ptr<backend>> make_backend(const std::string& name, std::shared_ptr<llama_model> m,
                                              const backend_options& o);
std::vector<std::string> backend_names();

// Adds "cpu" (defined in cpu_backend.cpp); backend_registry() calls it.
void add_cpu_backend(named_registry<backend_factory>& r);

// Checks a step against what `be` holds (its model's context and vocabulary, its KV blocks): a
// sequence without tokens, a negative n_past, a position past the context, a block table too
// short or naming a block out of range, a token id out of range, n_logits outside 1..tokens. Every backend's forward() calls
// it first, so that all of them refuse the same batches in the same words.
status validate_batch(const batch& b, const backend& be);

}  // namespace troupe::model

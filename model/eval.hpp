#pragma once
// The quality gate of the engine's fast paths, in llama.cpp's llama-perplexity way: perplexity of
// a token stream cut into windows of n_ctx tokens (each window on an empty KV memory, the second
// half of each scored), and, against a reference run's log-probabilities at the same positions
// (its --kl-divergence), the KL divergence, top-1 agreement and perplexity ratio of another run.
// `troupe eval` and the real-model quality test are built on it.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "model/backend.hpp"

namespace troupe::model {

struct eval_options {
  int32_t n_ctx = 512;     // tokens per window (llama-perplexity's default)
  int32_t max_chunks = 0;  // windows to score (0: all that the text fills)
  // When >= 0, the first token of each window is replaced by it (llama-perplexity does so with
  // BOS for models that add one); -1 leaves the text's tokens.
  int32_t bos = -1;
};

// One window's scored positions: rows of n_vocab log-probabilities (log-softmax of the logits, in
// position order) and the token each row predicts.
struct eval_chunk {
  int32_t index = 0;
  int32_t n_vocab = 0;
  std::vector<float> logprobs;   // targets.size() rows
  std::vector<int32_t> targets;
  const float* row(size_t i) const { return logprobs.data() + i * static_cast<size_t>(n_vocab); }
};

// The windows of `tokens` as evaluate() cuts them: chunk c holds tokens [c*n_ctx, (c+1)*n_ctx)
// with the first replaced by o.bos when set. An error when the text fills no window.
result<std::vector<std::vector<int32_t>>> eval_windows(const std::vector<int32_t>& tokens, const eval_options& o);

// Runs every window through `be` (one sequence on an empty KV memory; positions fed as one prompt)
// and calls on_chunk with each window's scored rows: positions n_ctx/2 .. n_ctx-2, each predicting
// the next token. The backend needs KV memory for n_ctx tokens.
status evaluate(backend& be, const std::vector<std::vector<int32_t>>& windows,
                const std::function<status(const eval_chunk&)>& on_chunk);

// Perplexity: exp of the mean negative log-likelihood of the scored tokens.
class ppl_accumulator {
 public:
  void add(const eval_chunk& c);
  int64_t count() const { return n_; }
  double mean_nll() const { return n_ ? nll_ / static_cast<double>(n_) : 0.0; }
  double ppl() const;

 private:
  double nll_ = 0.0;
  int64_t n_ = 0;
};

struct kl_summary {
  int64_t n_tokens = 0;
  double mean_kl = 0.0;   // mean over tokens of KL(reference || test), nats
  double p99_kl = 0.0;    // the 99th percentile of the per-token KL (nearest rank)
  double max_kl = 0.0;
  double top1_agreement = 0.0;  // fraction of tokens whose argmax is the same
  double ppl_reference = 0.0;
  double ppl_test = 0.0;
  double ppl_ratio() const { return ppl_reference > 0 ? ppl_test / ppl_reference : 0.0; }
};

// KL(P_ref || P_test) = sum_v p_ref(v) (log p_ref(v) - log p_test(v)), per scored token, over
// pairs of chunks of the same windows.
class kl_accumulator {
 public:
  // An error when the chunks are not of the same window (index, vocabulary or targets differ).
  status add(const eval_chunk& reference, const eval_chunk& test);
  kl_summary summary() const;

 private:
  std::vector<double> kl_;
  int64_t same_top1_ = 0;
  ppl_accumulator ref_, test_;
};

// The reference run's file (--save-logits / --kl-base): a header (magic "TROUPELP", version,
// n_vocab, n_ctx, n_chunks), the windows' tokens, then each chunk's rows as little-endian float32
// log-probabilities. llama.cpp's own file is not read: its rows are compressed to 16 bits.
class logits_writer {
 public:
  static result<logits_writer> open(const std::string& path, int32_t n_vocab,
                                    const std::vector<std::vector<int32_t>>& windows);
  logits_writer(logits_writer&& o) noexcept;
  logits_writer& operator=(logits_writer&&) = delete;
  ~logits_writer();
  status write(const eval_chunk& c);
  status close();

 private:
  logits_writer(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  std::FILE* f_ = nullptr;
  std::string path_;
};

class logits_reader {
 public:
  // An error naming the mismatch when the file is not a logits file, or was written for another
  // vocabulary or other windows (another text, --ctx or model).
  static result<logits_reader> open(const std::string& path, int32_t n_vocab,
                                    const std::vector<std::vector<int32_t>>& windows);
  logits_reader(logits_reader&& o) noexcept;
  logits_reader& operator=(logits_reader&&) = delete;
  ~logits_reader();
  // The next chunk's rows; an error when the file ends early.
  result<eval_chunk> next();

 private:
  logits_reader(std::FILE* f, std::string path, int32_t n_vocab, std::vector<std::vector<int32_t>> windows)
      : f_(f), path_(std::move(path)), n_vocab_(n_vocab), windows_(std::move(windows)) {}
  std::FILE* f_ = nullptr;
  std::string path_;
  int32_t n_vocab_ = 0;
  std::vector<std::vector<int32_t>> windows_;
  int32_t next_ = 0;
};

}  // namespace troupe::model

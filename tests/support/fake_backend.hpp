#pragma once
// A backend for unit tests: no model, but real paged KV bookkeeping. It stores the token ids it is
// fed in the slots its block tables name, and its next token is a hash of the whole history *as
// read back through the block table*, so a wrong block table, a block freed too early or a
// prefix shared by mistake changes the output. reference() computes the same outputs with no
// KV at all, which is what every scheduled run must reproduce.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model/backend.hpp"

namespace troupe::test {

struct fake_options {
  int32_t n_blocks = 64;
  int32_t block_size = 4;
  int32_t n_vocab = 320;     // byte codec layout: 0..255 bytes, 256 = eog
  int32_t eog = 256;
  int32_t eog_every = 0;     // ~1 in eog_every histories ends with eog; 0: never
  int32_t n_ctx = 4096;
  int64_t step_us = 0;       // sleep per step
  int64_t token_us = 0;      // and per token fed
  int64_t throw_on_call = 0; // 1-based forward call that throws (0: never)
  // A fault tied to one sequence: every forward() whose batch holds sequence fault_seq with a
  // position at or past fault_from_pos fails, by throwing when fault_throws, else by returning an
  // error. 0: never. fault_token likewise fails every forward() that feeds that token (-1:
  // never), for tests that do not know the sequence ids (a pipeline's).
  uint64_t fault_seq = 0;
  int32_t fault_from_pos = 0;
  int32_t fault_token = -1;
  bool fault_throws = true;
  // When set, a fixed text: the token after n tokens of history is script[(n - 1) % size]
  // (so a one-token prompt generates the script from its start).
  std::vector<int32_t> script;
};

inline uint64_t fake_hash(const int32_t* t, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]) + 0x9e37u * (i + 1);
    h *= 1099511628211ull;
  }
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return h;
}

inline int32_t fake_next(const fake_options& o, const int32_t* t, size_t n) {
  if (!o.script.empty()) return o.script[(n - 1) % o.script.size()];
  const uint64_t h = fake_hash(t, n);
  if (o.eog_every > 0 && (h >> 40) % static_cast<uint64_t>(o.eog_every) == 0) return o.eog;
  return 32 + static_cast<int32_t>(h % 95);  // printable ASCII
}

// What a request generates alone: tokens until eog (not included) or max_tokens.
inline std::vector<int32_t> fake_reference(const fake_options& o, std::vector<int32_t> prompt, int32_t max_tokens,
                                           bool ignore_eos = false) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < max_tokens) {
    int32_t t = fake_next(o, prompt.data(), prompt.size());
    if (t == o.eog && !ignore_eos) break;
    out.push_back(t);
    prompt.push_back(t);
  }
  return out;
}

class fake_backend final : public model::backend {
 public:
  explicit fake_backend(fake_options o) : o_(o), kv_(static_cast<size_t>(o.n_blocks) * o.block_size, -1) {
    hp_.arch = "fake";
    hp_.n_vocab = o.n_vocab;
    hp_.n_ctx_train = o.n_ctx;
  }
  std::string name() const override { return "fake"; }
  const model::hparams& params() const override { return hp_; }
  int32_t n_blocks() const override { return o_.n_blocks; }
  int32_t block_size() const override { return o_.block_size; }
  size_t kv_bytes_per_token() const override { return 4; }

  result<model::batch_logits> forward(const model::batch& b) override {
    const int64_t call = ++calls_;
    if (o_.throw_on_call > 0 && call == o_.throw_on_call) throw std::runtime_error("injected fault in forward()");
    for (const auto& s : b.seqs) {
      const bool by_seq = o_.fault_seq != 0 && s.seq_id == o_.fault_seq &&
                          s.n_past + static_cast<int32_t>(s.tokens.size()) > o_.fault_from_pos;
      const bool by_token =
          o_.fault_token >= 0 && std::find(s.tokens.begin(), s.tokens.end(), o_.fault_token) != s.tokens.end();
      if (by_seq || by_token) {
        const std::string what = "injected fault for sequence " + std::to_string(s.seq_id);
        ++faults_;
        if (o_.fault_throws) throw std::runtime_error(what);
        return make_error(what);
      }
    }
    if (o_.step_us > 0 || o_.token_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(o_.step_us + o_.token_us * b.n_tokens()));
    model::batch_logits out;
    out.n_vocab = o_.n_vocab;
    for (const auto& s : b.seqs) {
      const int32_t end = s.n_past + static_cast<int32_t>(s.tokens.size());
      if (static_cast<int64_t>(s.block_table.size()) * o_.block_size < end)
        return make_error("block table too short for sequence " + std::to_string(s.seq_id));
      for (size_t i = 0; i < s.tokens.size(); ++i) at(s, s.n_past + static_cast<int32_t>(i)) = s.tokens[i];
    }
    for (const auto& s : b.seqs) {
      if (!s.want_logits) continue;
      const int32_t end = s.n_past + static_cast<int32_t>(s.tokens.size());
      std::vector<int32_t> hist(static_cast<size_t>(end));
      for (int32_t p = 0; p < end; ++p) hist[static_cast<size_t>(p)] = at(s, p);
      // One row for each of the last n_logits positions (speculative verification).
      for (int32_t row_end = end - s.n_logits + 1; row_end <= end; ++row_end) {
        const int32_t next = fake_next(o_, hist.data(), static_cast<size_t>(row_end));
        out.seq_ids.push_back(s.seq_id);
        const size_t base = out.data.size();
        out.data.resize(base + static_cast<size_t>(o_.n_vocab), 0.0f);
        out.data[base + static_cast<size_t>(next)] = 10.0f;
      }
    }
    tokens_ += b.n_tokens();
    return out;
  }

  int64_t calls() const { return calls_; }
  int64_t tokens() const { return tokens_; }
  int64_t faults() const { return faults_; }

 private:
  int32_t& at(const model::batch_sequence& s, int32_t pos) {
    const auto blk = s.block_table[static_cast<size_t>(pos / o_.block_size)];
    return kv_[static_cast<size_t>(blk) * static_cast<size_t>(o_.block_size) + static_cast<size_t>(pos % o_.block_size)];
  }
  fake_options o_;
  model::hparams hp_;
  std::vector<int32_t> kv_;
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> tokens_{0};
  std::atomic<int64_t> faults_{0};
};

}  // namespace troupe::test

#include "model/backend.hpp"

namespace troupe::model {

int32_t batch::n_tokens() const {
  int32_t n = 0;
  for (const auto& s : seqs) n += static_cast<int32_t>(s.tokens.size());
  return n;
}

named_registry<backend_factory>& backend_registry() {
  static auto* r = new named_registry<backend_factory>("backend", {add_cpu_backend});
  return *r;
}

result<std::unique_ptr<backend>> make_backend(const std::string& name, std::shared_ptr<llama_model> m,
                                              const backend_options& o) {
  return backend_registry().make(name, std::move(m), o);
}

std::vector<std::string> backend_names() { return backend_registry().names(); }

status validate_batch(const batch& b, const backend& be) {
  const auto& hp = be.params();
  const int64_t block_size = be.block_size();
  const int32_t n_blocks = be.n_blocks();
  for (const auto& s : b.seqs) {
    const std::string who = "sequence " + std::to_string(s.seq_id) + ": ";
    if (s.tokens.empty()) return make_error(who + "no tokens in this step");
    if (s.n_past < 0) return make_error(who + "negative n_past");
    if (s.want_logits && (s.n_logits < 1 || s.n_logits > static_cast<int32_t>(s.tokens.size())))
      return make_error(who + "n_logits " + std::to_string(s.n_logits) + " outside 1.." +
                        std::to_string(s.tokens.size()) + " (the tokens fed this step)");
    const int64_t end = static_cast<int64_t>(s.n_past) + static_cast<int64_t>(s.tokens.size());
    if (end > hp.n_ctx_train)
      return make_error(who + "position " + std::to_string(end) + " exceeds the model context of " +
                        std::to_string(hp.n_ctx_train) + " tokens");
    if (static_cast<int64_t>(s.block_table.size()) * block_size < end)
      return make_error(who + "block table covers " + std::to_string(s.block_table.size() * block_size) +
                        " positions, step needs " + std::to_string(end));
    for (auto blk : s.block_table)
      if (blk < 0 || blk >= n_blocks) return make_error(who + "block id " + std::to_string(blk) + " out of range");
    for (auto t : s.tokens)
      if (t < 0 || t >= hp.n_vocab) return make_error(who + "token id " + std::to_string(t) + " out of range");
  }
  return {};
}

}  // namespace troupe::model

#include "actors/scheduler/speculative/proposer.hpp"

namespace troupe::actors {

named_registry<proposer_factory>& proposer_registry() {
  static auto* r = new named_registry<proposer_factory>("speculative method", {proposers::add_ngram, proposers::add_suffix, proposers::add_draft});
  return *r;
}

status check_speculative_config(const speculative_config& c) {
  if (c.k < 1 || c.k > 32) return make_error("speculative.k must be in 1..32 (got " + std::to_string(c.k) + ")");
  if (c.ngram_min < 1 || c.ngram_max < c.ngram_min || c.ngram_max > 64)
    return make_error("speculative.ngram_min and ngram_max need 1 <= ngram_min <= ngram_max <= 64 (got " +
                      std::to_string(c.ngram_min) + " and " + std::to_string(c.ngram_max) + ")");
  if (!(c.min_acceptance >= 0.0 && c.min_acceptance <= 1.0))
    return make_error("speculative.min_acceptance must be in 0..1");
  if (c.probe_steps < 1) return make_error("speculative.probe_steps must be at least 1");
  if (c.max_batch < 0) return make_error("speculative.max_batch must be 0 (no bound) or more");
  if (c.method == "draft" && c.draft_model.empty())
    return make_error("speculative.draft_model is required with speculative.method = \"draft\" (a GGUF file)");
  if (c.draft_threads < 0) return make_error("speculative.draft_threads must be 0 (all cores) or more");
  if (c.draft_kv_bytes <= 0) return make_error("speculative.draft_kv_mib must be at least 1");
  if (c.method != "off")
    if (auto f = proposer_registry().find(c.method); !f) return make_error(f.error() + "; or \"off\"");
  return {};
}

}  // namespace troupe::actors

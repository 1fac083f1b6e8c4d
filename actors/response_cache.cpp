#include "actors/response_cache.hpp"

#include <utility>

#include "cache/cache_key.hpp"

namespace troupe::actors {

namespace {

class exact_response_cache final : public response_cache {
 public:
  explicit exact_response_cache(const cache_config& cfg) : cache_(cfg) {}
  std::string name() const override { return "exact"; }
  std::optional<cache_answer> lookup(const admitted_request& r) override {
    const cache_entry* e = cache_.lookup(r);
    if (!e) return std::nullopt;
    return cache_answer{e->tokens, e->logprobs, e->finish_reason, 1.0f};
  }
  void on_closed(const closed_stream& c) override { cache_.on_closed(c); }
  cache_stats stats() const override {
    auto s = cache_.stats();
    s.policy = name();
    return s;
  }

 private:
  exact_cache cache_;
};

class semantic_response_cache final : public response_cache {
 public:
  semantic_response_cache(const cache::semantic_cache_config& cfg,
                          std::function<std::string(const std::vector<int32_t>&)> detokenize)
      : cache_(cfg) {
    if (detokenize) cache_.set_detokenizer(std::move(detokenize));
  }
  std::string name() const override { return "semantic"; }
  std::optional<cache_answer> lookup(const admitted_request& r) override {
    cache::cache_query q{r.cache_context, r.cache_question, r.cache_requested};
    auto hit = cache_.lookup(r, q);
    if (!hit) return std::nullopt;
    return cache_answer{std::move(hit->tokens), std::move(hit->logprobs), std::move(hit->finish_reason),
                        hit->similarity};
  }
  void on_closed(const closed_stream& c) override { cache_.on_closed(c); }
  cache_stats stats() const override { return cache_.stats(); }

 private:
  cache::semantic_cache cache_;
};

}  // namespace

named_registry<response_cache_factory>& response_cache_registry() {
  static auto* r = [] {
    auto* reg = new named_registry<response_cache_factory>("response cache policy");  // never destroyed
    reg->add("exact", [](const response_cache_config& c, std::function<std::string(const std::vector<int32_t>&)>)
                 -> result<std::unique_ptr<response_cache>> { return std::unique_ptr<response_cache>(new exact_response_cache(c.exact)); });
    reg->add("semantic", [](const response_cache_config& c, std::function<std::string(const std::vector<int32_t>&)> d)
                 -> result<std::unique_ptr<response_cache>> {
      return std::unique_ptr<response_cache>(new semantic_response_cache(c.semantic, std::move(d)));
    });
    return reg;
  }();
  return *r;
}

}  // namespace troupe::actors

#include "actors/response_cache/policy.hpp"

#include <string>
#include <utility>

namespace troupe::actors {

cache::cache_query query_of(const admitted_request& r, bool share_across_tenants) {
  cache::cache_query q;
  if (r.messages.empty()) {
    q = cache::cache_query::from_prompt(r.prompt_text, r.cache);
  } else {
    std::vector<cache::message_view> messages;
    messages.reserve(r.messages.size() + 1);
    // Participants' names are part of their turns (the template writes them), so of the key:
    // one more context entry lists them by message (roles stay as they are, so the question is
    // still the last user message).
    std::string names;
    for (size_t i = 0; i < r.messages.size(); ++i) {
      messages.push_back({r.messages[i].role, r.messages[i].content});
      if (!r.messages[i].name.empty()) names += std::to_string(i) + "=" + r.messages[i].name + "\n";
    }
    if (!names.empty()) messages.push_back({"names", names});
    q = cache::cache_query::from_messages(messages, r.cache);
  }
  q.id = r.id;
  q.model = r.model;
  q.prompt = r.prompt;
  q.sampling = r.sampling;
  q.max_tokens = r.max_tokens;
  q.stop = r.stop;
  q.eog = r.eog;
  q.logprobs = r.logprobs;
  q.tenant = r.tenant;
  q.share_across_tenants = share_across_tenants;
  q.constraint_kind = r.constraint.kind;
  q.constraint_source = r.constraint.source;
  return q;
}

cache::finished_answer answer_of(const closed_stream& c) {
  cache::finished_answer a;
  a.id = c.id;
  a.finish_reason = c.finish_reason;
  a.tokens = c.tokens;
  a.logprobs = c.logprobs;
  a.cached = c.cached;
  a.filtered = c.filtered;
  return a;
}

namespace {

// The counts both built-in caches keep, in the stage's stats.
template <class Stats>
response_cache_stats counts_of(const Stats& c, std::string policy) {
  response_cache_stats s;
  s.lookups = c.lookups;
  s.hits = c.hits;
  s.stores = c.stores;
  s.entries = c.entries;
  s.policy = std::move(policy);
  return s;
}

class exact_response_cache final : public response_cache {
 public:
  exact_response_cache(const cache::exact_cache_config& cfg, bool share) : cache_(cfg), share_(share) {}
  std::string name() const override { return "exact"; }
  std::optional<cache_answer> lookup(const admitted_request& r) override {
    const cache::cached_answer* e = cache_.lookup(query_of(r, share_));
    if (!e) return std::nullopt;
    return cache_answer{e->tokens, e->logprobs, e->finish_reason, 1.0f};
  }
  void on_closed(const closed_stream& c) override { cache_.on_closed(answer_of(c)); }
  response_cache_stats stats() const override { return counts_of(cache_.stats(), name()); }

 private:
  cache::exact_cache cache_;
  bool share_;
};

class semantic_response_cache final : public response_cache {
 public:
  semantic_response_cache(const cache::semantic_cache_config& cfg, bool share,
                          std::function<std::string(const std::vector<int32_t>&)> detokenize)
      : cache_(cfg), share_(share) {
    if (detokenize) cache_.set_detokenizer(std::move(detokenize));
  }
  std::string name() const override { return "semantic"; }
  std::optional<cache_answer> lookup(const admitted_request& r) override {
    auto hit = cache_.lookup(query_of(r, share_));
    if (!hit) return std::nullopt;
    return cache_answer{std::move(hit->tokens), std::move(hit->logprobs), std::move(hit->finish_reason),
                        hit->similarity};
  }
  void on_closed(const closed_stream& c) override { cache_.on_closed(answer_of(c)); }
  response_cache_stats stats() const override {
    const auto c = cache_.stats();
    auto s = counts_of(c, name());
    s.semantic_hits = c.semantic_hits;
    s.enabled = c.enabled;
    s.status = cache_.status();  // why disabled or exact-only; not the last store error
    return s;
  }

 private:
  cache::semantic_cache cache_;
  bool share_;
};

}  // namespace

named_registry<response_cache_factory>& response_cache_registry() {
  static auto* r = [] {
    auto* reg = new named_registry<response_cache_factory>("response cache policy");  // never destroyed
    reg->add("exact", [](const response_cache_config& c, std::function<std::string(const std::vector<int32_t>&)>)
                 -> result<std::unique_ptr<response_cache>> { return std::unique_ptr<response_cache>(new exact_response_cache(c.exact, c.share_across_tenants)); });
    reg->add("semantic", [](const response_cache_config& c, std::function<std::string(const std::vector<int32_t>&)> d)
                 -> result<std::unique_ptr<response_cache>> {
      return std::unique_ptr<response_cache>(new semantic_response_cache(c.semantic, c.share_across_tenants, std::move(d)));
    });
    return reg;
  }();
  return *r;
}

}  // namespace troupe::actors

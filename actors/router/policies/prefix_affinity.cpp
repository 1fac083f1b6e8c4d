// `prefix_affinity`: SGLang's cache-aware routing. A prompt goes to the replica most likely to
// hold its leading blocks in its prefix cache (the router's estimate, replica_view::
// prefix_hit_tokens), so shared system prompts and multi-turn chats are computed once per
// replica rather than once per request. Affinity yields to balance: when that replica's load
// (queued_tokens) exceeds the least loaded one's both by more than `max_imbalance` tokens and by
// more than `balance_ratio` times, the request goes to the least loaded replica instead (as
// least_loaded would choose), and so does a prompt no replica holds any block of, or less than
// `min_hit_ratio` of (the idea of SGLang's cache threshold: the chat template's opening, which
// every prompt shares, would otherwise tie every request to the replica that served first while
// the others idle). Among replicas with equal hits the least loaded wins.
//
// Options:
//   max_imbalance  (default 4096) tokens of queued work by which the affine replica may exceed
//                  the least loaded one before balance wins; >= 0. 0 with balance_ratio 1: any
//                  extra load sends the request away.
//   balance_ratio  (default 1.5) how many times the least loaded replica's queued work the
//                  affine replica may carry before balance wins; >= 1. Both limits must be
//                  exceeded (an absolute gap on a tiny load is no imbalance, nor is a ratio on
//                  a few tokens).
//   min_hit_ratio  (default 0.5) the share of the prompt the affine replica must hold for
//                  affinity to count; 0..1 (0: any hit counts).
#include "actors/router/policies/load_order.hpp"
#include "actors/router/policy.hpp"

namespace troupe::actors {
namespace {

class prefix_affinity final : public routing_policy {
 public:
  prefix_affinity(double max_imbalance, double balance_ratio, double min_hit_ratio)
      : max_imbalance_(max_imbalance), balance_ratio_(balance_ratio), min_hit_ratio_(min_hit_ratio) {}
  std::string name() const override { return "prefix_affinity"; }
  bool wants_prefix_hits() const override { return true; }

  std::optional<size_t> pick(const route_request& req, const std::vector<replica_view>& replicas) override {
    const size_t least = detail::least_loaded_index(replicas);
    size_t best = least;
    for (size_t i = 0; i < replicas.size(); ++i) {
      const auto& v = replicas[i];
      const auto& b = replicas[best];
      if (v.prefix_hit_tokens > b.prefix_hit_tokens ||
          (v.prefix_hit_tokens == b.prefix_hit_tokens && detail::less_loaded(v, b)))
        best = i;
    }
    if (replicas[best].prefix_hit_tokens <= 0) return least;
    if (req.prompt_tokens > 0 && replicas[best].prefix_hit_tokens < min_hit_ratio_ * req.prompt_tokens) return least;
    const double mine = static_cast<double>(replicas[best].queued_tokens);
    const double min = static_cast<double>(replicas[least].queued_tokens);
    if (mine - min > max_imbalance_ && mine > balance_ratio_ * min) return least;
    return best;
  }

 private:
  double max_imbalance_;
  double balance_ratio_;
  double min_hit_ratio_;
};

}  // namespace

void add_prefix_affinity(named_registry<routing_policy_factory>& r) {
  (void)r.add("prefix_affinity", [](const routing_options& o) -> result<std::unique_ptr<routing_policy>> {
    if (auto s = check_routing_keys("prefix_affinity", o, {"max_imbalance", "balance_ratio", "min_hit_ratio"}); !s)
      return make_error(s.error());
    const double max_imbalance = o.get("max_imbalance", 4096.0);
    const double balance_ratio = o.get("balance_ratio", 1.5);
    const double min_hit_ratio = o.get("min_hit_ratio", 0.5);
    if (!(min_hit_ratio >= 0 && min_hit_ratio <= 1))
      return make_error("prefix_affinity: min_hit_ratio must be in 0..1 (a share of the prompt), got " +
                        std::to_string(min_hit_ratio));
    if (!(max_imbalance >= 0))
      return make_error("prefix_affinity: max_imbalance must be >= 0 (tokens of queued work), got " +
                        std::to_string(max_imbalance));
    if (!(balance_ratio >= 1))
      return make_error("prefix_affinity: balance_ratio must be >= 1 (a multiple of the least loaded replica's "
                        "queued work), got " + std::to_string(balance_ratio));
    return std::unique_ptr<routing_policy>(new prefix_affinity(max_imbalance, balance_ratio, min_hit_ratio));
  });
}

}  // namespace troupe::actors

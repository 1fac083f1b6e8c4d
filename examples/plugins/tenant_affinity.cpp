// Shows: a routing policy built as a plugin and chosen by name in the config (`router.policy`).
// `tenant_affinity` sends every request of a tenant to one replica, the tenant's home: a tenant's
// requests share their system prompt, few-shot examples and conversation history, so keeping them
// together keeps those prefixes hot in one replica's prefix cache (without the router tracking
// block hashes, as prefix_affinity does), and a tenant's burst fills its home's queue rather than
// every replica's.
//
// The home is chosen by rendezvous (highest random weight) hashing of the tenant over the ids of
// the live replicas that take new requests: each replica scores hash(tenant, id), the highest
// wins. Unlike a hash modulo the replica count, a replica that joins or leaves moves only the
// tenants whose home it becomes or was. The hash is FNV-1a then splitmix64, fixed here (not
// std::hash), so every front and every restart agrees on the homes. A replica that rejoins is a
// new replica to the router (a new id), so its tenants get new homes.
//
// Affinity yields to load: when the home already carries more than `max_queued_tokens` of work
// placed there and not finished (replica_view::queued_tokens, the router's own count), the
// request goes to the least loaded replica instead (the order `least_loaded` uses), and the next
// request tries the home again. Requests that name no tenant (admission calls them "default")
// share nothing, so they go to the least loaded replica too.
//
//   plugins = ["build/examples/libtroupe_tenant_affinity.so"]
//   [router]
//   policy = "tenant_affinity"
//   [router.policy_options]
//   max_queued_tokens = 8192   # the home's queued work past which a request goes elsewhere; >= 0
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actors/plugins/plugin_api.hpp"
#include "actors/router/policies/load_order.hpp"  // inline: least_loaded's order, compiled in here

namespace {

using namespace troupe;
using namespace troupe::actors;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// splitmix64's finalizer: FNV alone leaves the low bits of close inputs alike.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class tenant_affinity final : public routing_policy {
 public:
  explicit tenant_affinity(double max_queued_tokens) : max_queued_tokens_(max_queued_tokens) {}
  std::string name() const override { return "tenant_affinity"; }

  std::optional<size_t> pick(const route_request& r, const std::vector<replica_view>& replicas) override {
    const size_t least = actors::detail::least_loaded_index(replicas);
    if (r.tenant.empty() || r.tenant == "default") return least;
    const uint64_t tenant = fnv1a(r.tenant);
    size_t home = 0;
    uint64_t best = mix(tenant ^ mix(replicas[0].id));
    for (size_t i = 1; i < replicas.size(); ++i) {
      const uint64_t score = mix(tenant ^ mix(replicas[i].id));
      if (score > best || (score == best && replicas[i].id < replicas[home].id)) {
        home = i;
        best = score;
      }
    }
    if (static_cast<double>(replicas[home].queued_tokens) > max_queued_tokens_) return least;
    return home;
  }

 private:
  double max_queued_tokens_;
};

result<std::unique_ptr<routing_policy>> make_tenant_affinity(const routing_options& o) {
  if (auto s = check_routing_keys("tenant_affinity", o, {"max_queued_tokens"}); !s) return make_error(s.error());
  const double max_queued_tokens = o.get("max_queued_tokens", 8192.0);
  if (!(max_queued_tokens >= 0))
    return make_error("routing policy 'tenant_affinity': max_queued_tokens must be >= 0 (tokens of queued work on "
                      "the tenant's replica), got " + std::to_string(max_queued_tokens));
  return std::unique_ptr<routing_policy>(new tenant_affinity(max_queued_tokens));
}

}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_routing_policy("tenant_affinity", make_tenant_affinity);
  return 0;
}

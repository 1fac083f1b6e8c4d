// A plugin that registers a name the fair_share example plugin registers too.
#include "actors/plugins/plugin_api.hpp"

namespace {
class lifo final : public troupe::actors::scheduling_policy {
 public:
  std::string name() const override { return "fair_share"; }
  bool before(const troupe::actors::seq_view& a, const troupe::actors::seq_view& b, int64_t) const override {
    return a.arrival_us > b.arrival_us;
  }
};
}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_scheduling_policy("fair_share", [](const troupe::actors::policy_options&)
                                                -> troupe::result<std::unique_ptr<troupe::actors::scheduling_policy>> {
    return std::unique_ptr<troupe::actors::scheduling_policy>(new lifo);
  });
  return 0;
}

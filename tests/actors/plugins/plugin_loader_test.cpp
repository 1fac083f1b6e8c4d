// The plugin loader over registries of its own: the example plugins register their parts; broken
// libraries fail with the path and a reason a person can act on (a missing file, no plugin
// symbols, an ABI mismatch naming both versions, a failing entry point, a name taken by another
// plugin or by troupe itself, naming both: a routing policy named like a built-in one too).
#include "actors/plugins/plugin_loader.hpp"

#include <gtest/gtest.h>

#include "actors/plugins/plugin_api.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

std::string example(const std::string& name) { return std::string(TROUPE_EXAMPLE_PLUGIN_DIR) + "/libtroupe_" + name + ".so"; }
std::string broken(const std::string& name) { return std::string(TROUPE_TEST_PLUGIN_DIR) + "/libtest_plugin_" + name + ".so"; }

// Fresh registries, with one built-in of each kind so that clashes with "troupe itself" show.
struct fresh {
  named_registry<policy_factory> scheduling{"scheduling policy"};
  named_registry<admission_policy_factory> admission{"admission policy"};
  named_registry<stream_filter_factory> filters{"stream filter"};
  named_registry<response_cache_factory> caches{"response cache policy"};
  named_registry<routing_policy_factory> routing{"routing policy"};
  named_registry<admission_actor_factory> admission_actors{"admission actor"};
  named_registry<filter_actor_factory> filter_actors{"filter actor"};
  fresh() {
    filters.add("redact", [](const option_map&) -> result<filter_maker> { return make_error("unused"); });
    add_round_robin(routing);
  }
  plugin_registries all() {
    return {&scheduling, &admission, &filters, &caches, &routing, &admission_actors, &filter_actors};
  }
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(plugin_loader, example_plugins_register_their_parts) {
  fresh f;
  plugin_loader l(f.all());
  auto a = l.load(example("fair_share"));
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(a->registered, std::vector<std::string>{"scheduling policy 'fair_share'"});
  auto b = l.load(example("daily_quota"));
  ASSERT_TRUE(b.ok()) << b.error();
  auto c = l.load(example("pattern_stop"));
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(f.scheduling.contains("fair_share"));
  EXPECT_EQ(b->registered, std::vector<std::string>{"admission actor 'daily_quota'"});
  EXPECT_EQ(c->registered, std::vector<std::string>{"filter actor 'pattern_stop'"});
  EXPECT_TRUE(f.admission_actors.contains("daily_quota"));
  EXPECT_TRUE(f.filter_actors.contains("pattern_stop"));
  EXPECT_FALSE(f.filters.contains("pattern_stop"));
  // The factories work, and check their options.
  auto pol = f.scheduling.make("fair_share", policy_options{{{"weight_alice", 3.0}}});
  ASSERT_TRUE(pol.ok()) << pol.error();
  EXPECT_EQ(pol.value()->name(), "fair_share");
  auto bad = f.scheduling.make("fair_share", policy_options{{{"wieght_alice", 3.0}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(bad.error(), "no option 'wieght_alice'")) << bad.error();
  // Loading the same library again registers nothing twice.
  auto again = l.load(example("fair_share"));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->registered.size(), 1u);
}

TEST(plugin_loader, a_plugin_registers_a_routing_policy) {
  fresh f;
  plugin_loader l(f.all());
  auto r = l.load(example("tenant_affinity"));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->registered, std::vector<std::string>{"routing policy 'tenant_affinity'"});
  EXPECT_EQ(f.routing.names(), (std::vector<std::string>{"round_robin", "tenant_affinity"}));
  auto pol = f.routing.make("tenant_affinity", routing_options{{{"max_queued_tokens", 100.0}}});
  ASSERT_TRUE(pol.ok()) << pol.error();
  EXPECT_EQ(pol.value()->name(), "tenant_affinity");
  EXPECT_FALSE(pol.value()->wants_prefix_hits());
  // Its factory checks its options with check_routing_keys, troupe's own (resolved in the program).
  auto typo = f.routing.make("tenant_affinity", routing_options{{{"max_queued_token", 100.0}}});
  ASSERT_FALSE(typo.ok());
  EXPECT_TRUE(has(typo.error(), "routing policy 'tenant_affinity' has no option 'max_queued_token' (it has: "
                                "max_queued_tokens)"))
      << typo.error();
  auto negative = f.routing.make("tenant_affinity", routing_options{{{"max_queued_tokens", -1.0}}});
  ASSERT_FALSE(negative.ok());
  EXPECT_TRUE(has(negative.error(), "max_queued_tokens must be >= 0")) << negative.error();
}

TEST(plugin_loader, an_abi_mismatch_names_both_versions_and_runs_nothing) {
  fresh f;
  plugin_loader l(f.all());
  auto r = l.load(broken("bad_abi"));
  ASSERT_FALSE(r.ok());
  const std::string want = "plugin " + broken("bad_abi") + " was built for ABI " +
                           std::to_string(TROUPE_PLUGIN_ABI_VERSION + 41) + ", this troupe has ABI " +
                           std::to_string(TROUPE_PLUGIN_ABI_VERSION);
  EXPECT_TRUE(has(r.error(), want)) << r.error();
  EXPECT_FALSE(has(r.error(), "must not run")) << r.error();
}

TEST(plugin_loader, a_name_taken_by_another_plugin_names_both) {
  fresh f;
  plugin_loader l(f.all());
  ASSERT_TRUE(l.load(example("fair_share")).ok());
  auto r = l.load(broken("duplicate"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.error(), "scheduling policy 'fair_share' of plugin " + broken("duplicate") +
                                 " is already registered by plugin " + example("fair_share")))
      << r.error();
}

TEST(plugin_loader, a_name_taken_by_troupe_itself_says_so) {
  fresh f;
  plugin_loader l(f.all());
  auto r = l.load(broken("builtin_clash"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.error(), "stream filter 'redact' of plugin " + broken("builtin_clash") +
                                 " is already registered by troupe itself"))
      << r.error();
}

TEST(plugin_loader, a_routing_policy_may_not_take_a_built_in_name) {
  fresh f;
  plugin_loader l(f.all());
  auto r = l.load(broken("routing_clash"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.error(), "routing policy 'round_robin' of plugin " + broken("routing_clash") +
                                 " is already registered by troupe itself"))
      << r.error();
  auto still = f.routing.make("round_robin", routing_options{});
  ASSERT_TRUE(still.ok()) << still.error();
  EXPECT_EQ(still.value()->name(), "round_robin");
}

TEST(plugin_loader, an_actor_may_not_take_the_name_of_a_policy_or_filter_of_its_kind) {
  fresh f;
  plugin_loader l(f.all());
  auto r = l.load(broken("kind_clash"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has(r.error(), "filter actor 'redact' of plugin " + broken("kind_clash") +
                                 " takes the name of an existing stream filter (they share one namespace)"))
      << r.error();
  EXPECT_FALSE(f.filter_actors.contains("redact"));
}

TEST(plugin_loader, missing_files_and_missing_symbols_say_which_and_why) {
  fresh f;
  plugin_loader l(f.all());
  auto missing = l.load("/nonexistent/libnothing.so");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(has(missing.error(), "plugin /nonexistent/libnothing.so: cannot load it: ")) << missing.error();
  EXPECT_TRUE(has(missing.error(), "No such file")) << missing.error();  // dlerror's words

  auto other = l.load(broken("not_a_plugin"));
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(has(other.error(), "is not a troupe plugin: it defines no troupe_plugin_abi_version()")) << other.error();

  auto no_entry = l.load(broken("no_entry"));
  ASSERT_FALSE(no_entry.ok());
  EXPECT_TRUE(has(no_entry.error(), "has no entry point troupe_plugin_register")) << no_entry.error();

  auto failing = l.load(broken("failing"));
  ASSERT_FALSE(failing.ok());
  EXPECT_TRUE(has(failing.error(), "its entry point failed (returned 3): no licence file found in /etc/example"))
      << failing.error();
}

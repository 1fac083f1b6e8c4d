#include "config/config_diff.hpp"

#include <map>

#include "config/detail/toml_schema.hpp"

namespace troupe::config {

namespace {

std::string text_of(const toml::node& n) { return detail::inline_value(n); }

const toml::node* node_at(const toml::table& root, const std::string& key) {
  return root.at_path(key).node();
}

// key -> value text, one entry per key of the schema, or per entry of the keys that list
// their entries separately (tenants, policy options).
std::map<std::string, std::string> flatten(const troupe_config& c, std::vector<std::string>& order) {
  toml::table root;
  std::map<std::string, std::string> out;
  for (const auto& s : detail::schema()) {
    s.write(c, root, true);
    const auto* n = node_at(root, s.key);
    if (!n) continue;
    if (s.diff_entries && n->is_table()) {
      // Leaves below the key: one level for policy options, two for tenants.
      std::vector<std::pair<std::string, const toml::node*>> stack{{s.key, n}};
      while (!stack.empty()) {
        auto [k, node] = stack.back();
        stack.pop_back();
        if (const auto* t = node->as_table()) {
          for (const auto& [ck, cv] : *t) stack.push_back({k + "." + std::string(ck.str()), &cv});
        } else {
          out[k] = text_of(*node);
          order.push_back(k);
        }
      }
    } else {
      out[s.key] = text_of(*n);
      order.push_back(s.key);
    }
  }
  return out;
}

}  // namespace

std::vector<config_change> config_diff(const troupe_config& before, const troupe_config& after) {
  std::vector<std::string> order_a, order_b;
  const auto a = flatten(before, order_a);
  const auto b = flatten(after, order_b);
  std::vector<config_change> out;
  auto add = [&](const std::string& key) {
    auto ia = a.find(key), ib = b.find(key);
    const std::string va = ia == a.end() ? std::string() : ia->second;
    const std::string vb = ib == b.end() ? std::string() : ib->second;
    const bool secret = key == "auth.admin_token" || key == "auth.api_keys";
    bool changed = (ia == a.end()) != (ib == b.end()) || va != vb;
    // Secrets read "<redacted>" in both texts: their values are compared instead.
    if (secret)
      changed = key == "auth.admin_token" ? before.server.admin_token != after.server.admin_token
                                          : before.server.api_keys != after.server.api_keys ||
                                                before.server.api_key_tenants != after.server.api_key_tenants;
    if (changed) out.push_back({key, reload_of(key), va, vb});
  };
  for (const auto& k : order_a) add(k);
  for (const auto& k : order_b)
    if (!a.count(k)) add(k);
  return out;
}

troupe_config with_restart_keys_of(const troupe_config& running, const troupe_config& next) {
  troupe_config out = next;
  toml::table root;
  detail::reader r("(running config)");
  for (const auto& s : detail::schema()) {
    if (s.reload != reload_kind::restart) continue;
    s.write(running, root, false);
    if (const auto* n = node_at(root, s.key)) s.read(out, *n, r);
  }
  return out;
}

std::set<std::string> stages_to_replace(const std::vector<config_change>& changes) {
  std::set<std::string> out;
  for (const auto& c : changes) {
    if (c.reload != reload_kind::hot) continue;
    if (auto stage = stage_of(c.key); !stage.empty()) out.insert(std::move(stage));
  }
  return out;
}

bool needs_restart(const std::vector<config_change>& changes) {
  for (const auto& c : changes)
    if (c.reload == reload_kind::restart) return true;
  return false;
}

}  // namespace troupe::config

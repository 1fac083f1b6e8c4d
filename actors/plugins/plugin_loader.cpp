#include "actors/plugins/plugin_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <exception>

#include <spdlog/spdlog.h>

#include "actors/plugins/plugin_api.hpp"

namespace troupe::actors {

plugin_registries plugin_registries::global() {
  plugin_registries r;
  r.scheduling_policies = &scheduling_policy_registry();
  r.admission_policies = &admission_policy_registry();
  r.stream_filters = &stream_filter_registry();
  r.response_caches = &response_cache_registry();
  r.routing_policies = &routing_policy_registry();
  r.admission_actors = &admission_actor_registry();
  r.filter_actors = &filter_actor_registry();
  return r;
}

// The host one entry point sees. Registers into the loader's registries and remembers who
// registered what, so that a clash names both sides.
class plugin_host_impl final : public troupe_plugin_host {
 public:
  plugin_host_impl(plugin_loader& l, std::string path) : l_(l), path_(std::move(path)) {}

  int abi_version() const override { return TROUPE_PLUGIN_ABI_VERSION; }
  const char* plugin_path() const override { return path_.c_str(); }

  status add_scheduling_policy(const std::string& name, policy_factory f) override {
    return add("scheduling policy", l_.reg_.scheduling_policies, name, std::move(f));
  }
  // Admission policies and actors share their names, as do stream filters and filter actors.
  status add_admission_policy(const std::string& name, admission_policy_factory f) override {
    return add_beside("admission policy", l_.reg_.admission_policies, "admission actor", l_.reg_.admission_actors,
                      name, std::move(f));
  }
  status add_stream_filter(const std::string& name, stream_filter_factory f) override {
    return add_beside("stream filter", l_.reg_.stream_filters, "filter actor", l_.reg_.filter_actors, name, std::move(f));
  }
  status add_admission_actor(const std::string& name, admission_actor_factory f) override {
    return add_beside("admission actor", l_.reg_.admission_actors, "admission policy", l_.reg_.admission_policies,
                      name, std::move(f));
  }
  status add_filter_actor(const std::string& name, filter_actor_factory f) override {
    return add_beside("filter actor", l_.reg_.filter_actors, "stream filter", l_.reg_.stream_filters, name, std::move(f));
  }
  status add_response_cache(const std::string& name, response_cache_factory f) override {
    return add("response cache policy", l_.reg_.response_caches, name, std::move(f));
  }
  status add_routing_policy(const std::string& name, routing_policy_factory f) override {
    return add("routing policy", l_.reg_.routing_policies, name, std::move(f));
  }

  void log(const std::string& message) override { spdlog::info("troupe: plugin {}: {}", path_, message); }
  void fail(const std::string& message) override { failure_ = message; }

  const std::string& first_error() const { return first_error_; }
  const std::string& failure() const { return failure_; }
  std::vector<std::string>& registered() { return registered_; }

 private:
  template <class Registry, class Factory>
  status add(const char* kind, Registry* reg, const std::string& name, Factory f) {
    const std::string what = std::string(kind) + " '" + name + "'";
    if (!reg) return note("this troupe takes no " + std::string(kind) + " from plugins");
    if (name.empty()) return note(std::string("a ") + kind + " needs a name");
    if (!f) return note(what + " has no factory");
    if (reg->contains(name)) {
      auto it = l_.origin_.find(what);
      const std::string by = it != l_.origin_.end() ? (it->second == path_ ? "this same plugin" : "plugin " + it->second)
                                                    : "troupe itself (built in, or registered by the program)";
      return note(what + " of plugin " + path_ + " is already registered by " + by);
    }
    if (auto s = reg->add(name, std::move(f)); !s) return note(s.error());
    l_.origin_[what] = path_;
    registered_.push_back(what);
    return {};
  }

  // add() into `reg`, for a kind whose names are one namespace with those of `other` in `other_reg`.
  template <class Registry, class OtherRegistry, class Factory>
  status add_beside(const char* kind, Registry* reg, const char* other, OtherRegistry* other_reg,
                    const std::string& name, Factory f) {
    if (other_reg && !name.empty() && other_reg->contains(name))
      return note(std::string(kind) + " '" + name + "' of plugin " + path_ + " takes the name of an existing " + other +
                  " (they share one namespace)");
    return add(kind, reg, name, std::move(f));
  }

  status note(const std::string& message) {
    if (first_error_.empty()) first_error_ = message;
    return make_error(message);
  }

  plugin_loader& l_;
  std::string path_;
  std::vector<std::string> registered_;
  std::string first_error_;  // of a registration
  std::string failure_;      // the plugin's own, with a non-zero return
};

namespace {

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char buf[PATH_MAX];
  if (!::getcwd(buf, sizeof buf)) return path;
  return std::string(buf) + "/" + path;
}

std::string last_dl_error() {
  const char* e = ::dlerror();
  return e ? std::string(e) : std::string("no reason given");
}

}  // namespace

plugin_loader::plugin_loader(plugin_registries r) : reg_(r) {}

plugin_loader& plugin_loader::global() {
  static auto* l = new plugin_loader(plugin_registries::global());  // never destroyed, like the registries
  return *l;
}

result<loaded_plugin> plugin_loader::load(const std::string& given) {
  const std::string path = absolute(given);
  std::lock_guard<std::mutex> lock(mu_);
  // RTLD_LOCAL: one plugin's symbols do not stand in for another's.
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return make_error("plugin " + given + ": cannot load it: " + last_dl_error());
  if (auto it = loaded_.find(h); it != loaded_.end()) return it->second;

  ::dlerror();
  auto abi = reinterpret_cast<troupe_plugin_abi_version_fn>(::dlsym(h, "troupe_plugin_abi_version"));
  if (!abi) {
    const auto why = last_dl_error();
    ::dlclose(h);
    return make_error("plugin " + given + " is not a troupe plugin: it defines no troupe_plugin_abi_version() (" + why +
                      "); see actors/plugins/plugin_api.hpp");
  }
  const int theirs = abi();
  if (theirs != TROUPE_PLUGIN_ABI_VERSION) {
    ::dlclose(h);
    return make_error("plugin " + given + " was built for ABI " + std::to_string(theirs) + ", this troupe has ABI " +
                      std::to_string(TROUPE_PLUGIN_ABI_VERSION) + "; rebuild it against this troupe's actors/plugins/plugin_api.hpp");
  }
  ::dlerror();
  auto entry = reinterpret_cast<troupe_plugin_register_fn>(::dlsym(h, "troupe_plugin_register"));
  if (!entry) {
    const auto why = last_dl_error();
    ::dlclose(h);
    return make_error("plugin " + given + " has no entry point troupe_plugin_register (" + why + ")");
  }

  plugin_host_impl host(*this, path);
  int rc = 0;
  std::string thrown;
  try {
    rc = entry(&host);
  } catch (const std::exception& e) {
    thrown = e.what();
  } catch (...) {
    thrown = "an exception that is not a std::exception";
  }
  // What it registered stays registered (its factories point into the library, which therefore
  // stays loaded): a failed plugin stops startup anyway.
  if (!thrown.empty()) return make_error("plugin " + given + ": its entry point threw: " + thrown);
  if (!host.first_error().empty()) return make_error("plugin " + given + ": " + host.first_error());
  if (rc != 0)
    return make_error("plugin " + given + ": its entry point failed (returned " + std::to_string(rc) + ")" +
                      (host.failure().empty() ? std::string() : ": " + host.failure()));
  loaded_plugin out{path, std::move(host.registered())};
  loaded_[h] = out;
  return out;
}

result<std::vector<loaded_plugin>> load_plugins(const std::vector<std::string>& paths) {
  std::vector<loaded_plugin> out;
  for (const auto& p : paths) {
    auto l = plugin_loader::global().load(p);
    if (!l) return make_error(l.error());
    std::string names;
    for (const auto& n : l->registered) names += (names.empty() ? "" : ", ") + n;
    spdlog::info("troupe: plugin {} registered {}", l->path, names.empty() ? std::string("nothing") : names);
    out.push_back(std::move(l.value()));
  }
  return out;
}

}  // namespace troupe::actors

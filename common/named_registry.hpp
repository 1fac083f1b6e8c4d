#pragma once
// The one registry of things chosen by name: scheduling and admission policies, stream filters,
// filter and admission actors, response cache policies, embedders, backends, architectures. A
// duplicate name is an error; asking for an unknown name gives an error that lists the names
// that exist. Thread-safe: plugins register while other threads may look names up.
//
// One way to register built-ins: each process-wide registry is a function that makes it on first
// use and calls an explicit list of add_* functions (a static initializer in a static library
// is dropped by the linker unless something else pulls its object file in). Parts outside the
// library that holds the registry (the cuda backend, a program's own policy, a plugin) are added
// the same way, by whoever links them in: the executable at startup, the plugin loader.
// Tests construct a registry of their own and inject fakes.
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace troupe {

namespace detail {

// make(): what registries of factory functions add to find(). Registries of plain values
// (architectures) have find() only.
template <class Registry, class Factory>
class registry_make {};

template <class Registry, class R, class... A>
class registry_make<Registry, std::function<R(A...)>> {
 public:
  // What the factory registered as `name` makes from `args`, or the error listing the known names.
  R make(const std::string& name, A... args) const {
    auto f = static_cast<const Registry&>(*this).find(name);
    if (!f) return make_error(f.error());
    return f.value()(std::forward<A>(args)...);
  }
  // The same with every argument default-made (a policy's options left at their defaults).
  template <size_t N = sizeof...(A), std::enable_if_t<(N > 0), int> = 0>
  R make(const std::string& name) const {
    return make(name, std::decay_t<A>{}...);
  }
};

}  // namespace detail

template <class Factory>
class named_registry : public detail::registry_make<named_registry<Factory>, Factory> {
 public:
  using adder = void (*)(named_registry&);

  // `kind` names what is registered, for messages: "response cache", "stream filter".
  explicit named_registry(std::string kind) : kind_(std::move(kind)) {}
  // Holding the built-ins that `builtins` add, in order: how a process-wide registry is made on
  // its first use (and never destroyed: plugins and threads still running at exit hold on).
  named_registry(std::string kind, std::initializer_list<adder> builtins) : kind_(std::move(kind)) {
    for (adder add_builtin : builtins) add_builtin(*this);
  }
  named_registry(const named_registry&) = delete;
  named_registry& operator=(const named_registry&) = delete;

  status add(const std::string& name, Factory f) {
    if (name.empty()) return make_error("a " + kind_ + " needs a name");
    std::lock_guard<std::mutex> lock(mu_);
    if (!factories_.emplace(name, std::move(f)).second) return make_error(kind_ + " '" + name + "' is registered twice");
    return {};
  }

  // The factory registered as `name` (a copy: it is called outside the lock), or an error
  // listing the known names.
  result<Factory> find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(name);
    if (it != factories_.end()) return it->second;
    return make_error("unknown " + kind_ + " '" + name + "' (known: " + joined_locked() + ")");
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& kv : factories_) out.push_back(kv.first);
    return out;
  }

  bool contains(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    return factories_.count(name) != 0;
  }

  const std::string& kind() const { return kind_; }

 private:
  std::string joined_locked() const {
    std::string s;
    for (const auto& kv : factories_) s += (s.empty() ? "" : ", ") + kv.first;
    return s.empty() ? std::string("none") : s;
  }

  std::string kind_;
  mutable std::mutex mu_;
  std::map<std::string, Factory> factories_;
};

}  // namespace troupe

#pragma once
// A registry of factories by name, for every kind of swappable part (response caches, stream
// filters, admission and scheduling policies of plugins). A duplicate name is an error; asking
// for an unknown name gives an error that lists the names that exist. Thread-safe: plugins
// register while other threads may look names up.
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/result.hpp"

namespace troupe::actors {

template <class Factory>
class named_registry {
 public:
  // `kind` names what is registered, for messages: "response cache", "stream filter".
  explicit named_registry(std::string kind) : kind_(std::move(kind)) {}

  status add(const std::string& name, Factory f) {
    if (name.empty()) return make_error("a " + kind_ + " needs a name");
    std::lock_guard<std::mutex> lock(mu_);
    if (!factories_.emplace(name, std::move(f)).second) return make_error(kind_ + " '" + name + "' is registered twice");
    return {};
  }

  // The factory registered as `name`, or an error listing the known names.
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

}  // namespace troupe::actors

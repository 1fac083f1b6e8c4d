#include "model/architecture.hpp"

#include <map>

namespace troupe::model {

namespace {
const std::map<std::string, architecture>& registry() {
  static const std::map<std::string, architecture> r = [] {
    std::map<std::string, architecture> m;
    for (auto a : {arch_llama(), arch_qwen2()}) m.emplace(a.name, a);
    return m;
  }();
  return r;
}
}  // namespace

const architecture* find_architecture(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> architecture_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : registry()) out.push_back(k);
  return out;
}

}  // namespace troupe::model

#include "model/backend.hpp"

#include <map>
#include <stdexcept>

namespace troupe::model {

namespace {
std::map<std::string, backend_factory>& registry() {
  // The cpu backend is always there; others (cuda) register from their own library at start.
  static std::map<std::string, backend_factory> r = {{"cpu", cpu_backend_factory()}};
  return r;
}
}  // namespace

int32_t batch::n_tokens() const {
  int32_t n = 0;
  for (const auto& s : seqs) n += static_cast<int32_t>(s.tokens.size());
  return n;
}

register_backend::register_backend(const std::string& name, backend_factory f) {
  if (!registry().emplace(name, std::move(f)).second)
    throw std::logic_error("backend registered twice: " + name);
}

result<std::unique_ptr<backend>> make_backend(const std::string& name, std::shared_ptr<llama_model> m,
                                              const backend_options& o) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string names;
    for (const auto& [k, v] : registry()) names += (names.empty() ? "" : ", ") + k;
    return make_error("unknown backend '" + name + "' (available: " + names + ")");
  }
  return it->second(std::move(m), o);
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : registry()) out.push_back(k);
  return out;
}

}  // namespace troupe::model

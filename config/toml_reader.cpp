// The schema's reader: typed, range-checked access to TOML nodes, every problem recorded with
// file:line:col and the full key.
#include <string>

#include "config/detail/toml_schema.hpp"

namespace troupe::config::detail {


std::string reader::where(const toml::source_region& at) const {
  std::string path = at.path ? *at.path : source_;
  if (path.empty()) path = source_;
  // Overrides from the command line are one line each: their text says more than a position.
  if (at.begin.line == 0 || path.rfind("--", 0) == 0) return path;
  return path + ":" + std::to_string(at.begin.line) + ":" + std::to_string(at.begin.column);
}

void reader::fail(const toml::source_region& at, const std::string& key, const std::string& message) {
  errors_.push_back(where(at) + ": " + key + ": " + message);
}

void reader::fail_key(const std::string& key, const std::string& message) {
  if (const auto* n = node_of(key)) fail(*n, key, message);
  else errors_.push_back(source_ + ": " + key + ": " + message);
}

const toml::node* reader::node_of(const std::string& key) const {
  auto it = seen_.find(key);
  return it == seen_.end() ? nullptr : it->second;
}

std::optional<int64_t> reader::integer(const toml::node& n, const std::string& key, int64_t lo, int64_t hi) {
  const auto* i = n.as_integer();
  if (!i) {
    fail(n, key, "expected an integer, got " + type_name(n));
    return std::nullopt;
  }
  const int64_t v = i->get();
  if (v < lo || v > hi) {
    fail(n, key, std::to_string(v) + " is out of range (" + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    return std::nullopt;
  }
  return v;
}

std::optional<double> reader::number(const toml::node& n, const std::string& key, double lo, double hi) {
  double v = 0;
  if (const auto* f = n.as_floating_point()) v = f->get();
  else if (const auto* i = n.as_integer()) v = static_cast<double>(i->get());
  else {
    fail(n, key, "expected a number, got " + type_name(n));
    return std::nullopt;
  }
  if (!std::isfinite(v)) {
    fail(n, key, "expected a finite number");
    return std::nullopt;
  }
  if (v < lo || v > hi) {
    fail(n, key, number_text(v) + " is out of range (" + number_text(lo) + ".." + number_text(hi) + ")");
    return std::nullopt;
  }
  return v;
}

std::optional<bool> reader::boolean(const toml::node& n, const std::string& key) {
  if (const auto* b = n.as_boolean()) return b->get();
  fail(n, key, "expected true or false, got " + type_name(n));
  return std::nullopt;
}

std::optional<std::string> reader::string(const toml::node& n, const std::string& key, bool non_empty,
                                          const std::vector<std::string>& allowed) {
  const auto* s = n.as_string();
  if (!s) {
    fail(n, key, "expected a string, got " + type_name(n));
    return std::nullopt;
  }
  const std::string& v = s->get();
  if (non_empty && v.empty()) {
    fail(n, key, "must not be empty");
    return std::nullopt;
  }
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    std::string msg = "'" + v + "' is not one of " + join(allowed);
    if (auto c = closest(v, allowed); !c.empty()) msg += "; did you mean '" + c + "'?";
    fail(n, key, msg);
    return std::nullopt;
  }
  return v;
}

const toml::table* reader::table(const toml::node& n, const std::string& key) {
  if (const auto* t = n.as_table()) return t;
  fail(n, key, "expected a table, got " + type_name(n));
  return nullptr;
}

const toml::array* reader::array(const toml::node& n, const std::string& key) {
  if (const auto* a = n.as_array()) return a;
  fail(n, key, "expected an array, got " + type_name(n));
  return nullptr;
}

void reader::check_keys(const toml::table& t, const std::string& prefix, const std::vector<std::string>& known) {
  for (const auto& [k, v] : t) {
    const std::string name(k.str());
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    std::string msg = "unknown key";
    if (auto c = closest(name, known); !c.empty())
      msg += "; did you mean '" + (prefix.empty() ? c : prefix + "." + c) + "'?";
    else if (!known.empty())
      msg += " (" + (prefix.empty() ? std::string("sections and keys") : "keys of [" + prefix + "]") + ": " +
             join(known) + ")";
    fail(k.source(), full, msg);
  }
}

}  // namespace troupe::config::detail

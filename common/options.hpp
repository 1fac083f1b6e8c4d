#pragma once
// Options of a swappable part that takes more than numbers (a stream filter, an admission
// policy): named values as the config file gives them (booleans, numbers, strings, lists of
// strings), and a reader that takes them out typed. A part's factory reads each key it knows
// once, then asks the reader for the verdict: a wrong type or a key nobody asked for is an error
// that names the part, the key and the keys it has. Header-only: plugins use it too.
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/result.hpp"

namespace troupe {

// A TOML value of an options table (a filter's, an admission policy's), as config/ reads it.
using option_value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>>;
using option_map = std::map<std::string, option_value>;

class option_reader {
 public:
  // `owner` names the part in messages: "stream filter 'redact'".
  option_reader(std::string owner, const option_map& options) : owner_(std::move(owner)), opts_(options) {}

  bool has(const std::string& key) {
    note(key);
    return opts_.count(key) != 0;
  }

  std::string string(const std::string& key, std::string fallback = {}) {
    const auto* v = find(key);
    if (!v) return fallback;
    if (const auto* s = std::get_if<std::string>(v)) return *s;
    wrong(key, "a string", *v);
    return fallback;
  }

  // An integer or a floating-point number.
  double number(const std::string& key, double fallback) {
    const auto* v = find(key);
    if (!v) return fallback;
    if (const auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
    if (const auto* d = std::get_if<double>(v)) return *d;
    wrong(key, "a number", *v);
    return fallback;
  }

  int64_t integer(const std::string& key, int64_t fallback) {
    const auto* v = find(key);
    if (!v) return fallback;
    if (const auto* i = std::get_if<int64_t>(v)) return *i;
    wrong(key, "an integer", *v);
    return fallback;
  }

  bool boolean(const std::string& key, bool fallback) {
    const auto* v = find(key);
    if (!v) return fallback;
    if (const auto* b = std::get_if<bool>(v)) return *b;
    wrong(key, "true or false", *v);
    return fallback;
  }

  // A list of strings; a single string counts as a list of one.
  std::vector<std::string> strings(const std::string& key, std::vector<std::string> fallback = {}) {
    const auto* v = find(key);
    if (!v) return fallback;
    if (const auto* l = std::get_if<std::vector<std::string>>(v)) return *l;
    if (const auto* s = std::get_if<std::string>(v)) return {*s};
    wrong(key, "a list of strings", *v);
    return fallback;
  }

  // Every key that starts with `prefix`, by the rest of its name ("weight_" gives
  // {"alice": 3} for weight_alice = 3); these keys count as known. Values stay untyped.
  std::map<std::string, option_value> prefixed(const std::string& prefix) {
    note(prefix + "<name>");
    std::map<std::string, option_value> out;
    for (const auto& [k, v] : opts_) {
      if (k.size() > prefix.size() && k.compare(0, prefix.size(), prefix) == 0) {
        out[k.substr(prefix.size())] = v;
        prefixed_.push_back(k);
      }
    }
    return out;
  }

  // A problem the part found itself (a value out of range, options that contradict each other).
  void fail(const std::string& key, const std::string& message) {
    if (error_.empty()) error_ = owner_ + ": option '" + key + "': " + message;
  }

  // An unknown key with the keys this part has (often a typo that also explains a missing
  // key), or else the first problem.
  status finish() const {
    for (const auto& [k, v] : opts_) {
      if (is_known(k)) continue;
      std::string list;
      for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
      return make_error(owner_ + " has no option '" + k + "' (it has: " + (list.empty() ? std::string("none") : list) +
                        ")");
    }
    if (!error_.empty()) return make_error(error_);
    return {};
  }

  static const char* type_of(const option_value& v) {
    switch (v.index()) {
      case 0: return "a boolean";
      case 1: return "an integer";
      case 2: return "a floating-point number";
      case 3: return "a string";
      default: return "a list of strings";
    }
  }

 private:
  void note(const std::string& key) {
    for (const auto& n : known_)
      if (n == key) return;
    known_.push_back(key);
  }
  const option_value* find(const std::string& key) {
    note(key);
    auto it = opts_.find(key);
    return it == opts_.end() ? nullptr : &it->second;
  }
  void wrong(const std::string& key, const char* expected, const option_value& got) {
    fail(key, std::string("expected ") + expected + ", got " + type_of(got));
  }
  bool is_known(const std::string& k) const {
    for (const auto& n : known_)
      if (n == k) return true;
    for (const auto& n : prefixed_)
      if (n == k) return true;
    return false;
  }

  std::string owner_;
  const option_map& opts_;
  std::vector<std::string> known_;
  std::vector<std::string> prefixed_;
  std::string error_;
};

// Checks that `options` (a map from option name to value) only holds names from `known`; the
// error names the first stranger and what `what` ("policy 'sjf'") has.
template <class Map>
status check_known_keys(const std::string& what, const Map& options, const std::vector<std::string>& known) {
  for (const auto& kv : options) {
    bool found = false;
    for (const auto& n : known) found = found || n == kv.first;
    if (!found) {
      std::string list;
      for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
      return make_error(what + " has no option '" + kv.first + "' (it has: " + (list.empty() ? std::string("none") : list) +
                        ")");
    }
  }
  return {};
}

}  // namespace troupe

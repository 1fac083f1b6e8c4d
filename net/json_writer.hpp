#pragma once
// A small JSON writer for responses: appends to a string, places commas itself, escapes every
// string (control characters as \u00XX; invalid UTF-8 replaced by U+FFFD so the output is
// always valid JSON whatever bytes a token produced).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::net {

// Appends `s` to `out` as a quoted, escaped JSON string.
void append_json_string(std::string& out, std::string_view s);

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates).
bool is_valid_utf8(std::string_view s);

class json_writer {
 public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  json_writer& key(std::string_view k);
  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(const std::string& s) { return value(std::string_view(s)); }
  json_writer& value(int64_t v);
  json_writer& value(int32_t v) { return value(static_cast<int64_t>(v)); }
  json_writer& value(uint64_t v);
  json_writer& value(double v);
  // A float with every digit it needs to read back the same (value(double) writes 6).
  json_writer& value_float32(float v);
  json_writer& value(bool v);
  json_writer& null();
  // A value that is JSON text already (a client's schema passed on, a stored object): written as
  // it is, so it must be valid JSON.
  json_writer& raw(std::string_view json);
  // key + value in one call.
  template <class T>
  json_writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace troupe::net

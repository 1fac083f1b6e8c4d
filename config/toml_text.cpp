// TOML as text: type names and quoting for messages, and the config document written back
// (tables in a stable order, numbers in their shortest form) for `to_toml` and /admin/config.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "config/detail/toml_schema.hpp"

namespace troupe::config::detail {

std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

namespace {

bool bare_key(std::string_view k) {
  if (k.empty()) return false;
  for (char ch : k)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-')) return false;
  return true;
}

std::string key_text(std::string_view k) { return bare_key(k) ? std::string(k) : quote(k); }

std::string double_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string s = number_text(v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

bool array_of_tables(const toml::node& n) {
  const auto* a = n.as_array();
  return a && !a->empty() && a->is_array_of_tables();
}

void write_table(std::string& out, const toml::table& t, const std::string& path) {
  for (const auto& [k, v] : t)
    if (!v.is_table() && !array_of_tables(v)) out += key_text(k.str()) + " = " + inline_value(v) + "\n";
  for (const auto& [k, v] : t) {
    if (!v.is_table()) continue;
    const std::string sub = path.empty() ? key_text(k.str()) : path + "." + key_text(k.str());
    out += "\n[" + sub + "]\n";
    write_table(out, *v.as_table(), sub);
  }
  for (const auto& [k, v] : t) {
    if (!array_of_tables(v)) continue;
    const std::string sub = path.empty() ? key_text(k.str()) : path + "." + key_text(k.str());
    for (const auto& e : *v.as_array()) {
      out += "\n[[" + sub + "]]\n";
      // An element's own tables are written inline: a [sub.table] header here would be read
      // as belonging to the last element only by readers that get TOML's rule right.
      for (const auto& [ek, ev] : *e.as_table()) out += key_text(ek.str()) + " = " + inline_value(ev) + "\n";
    }
  }
}

}  // namespace

std::string inline_value(const toml::node& n) {
  if (const auto* s = n.as_string()) return quote(s->get());
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* f = n.as_floating_point()) return double_text(f->get());
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* a = n.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + inline_value(*a->get(i));
    return out + "]";
  }
  if (const auto* t = n.as_table()) {
    if (t->empty()) return "{}";
    std::string out = "{ ";
    bool first = true;
    for (const auto& [k, v] : *t) {
      out += (first ? "" : ", ") + key_text(k.str()) + " = " + inline_value(v);
      first = false;
    }
    return out + " }";
  }
  std::ostringstream os;  // dates and times: no key of the schema has one
  n.visit([&](const auto& x) { os << x; });
  return os.str();
}

std::string write_document(const toml::table& t) {
  std::string out;
  write_table(out, t, "");
  return out;
}

toml::table& table_at(toml::table& root, const std::string& parent) {
  toml::table* t = &root;
  size_t start = 0;
  while (start < parent.size()) {
    auto dot = parent.find('.', start);
    if (dot == std::string::npos) dot = parent.size();
    const std::string seg = parent.substr(start, dot - start);
    auto* next = t->get(seg);
    if (!next || !next->is_table()) {
      t->insert_or_assign(seg, toml::table{});
      next = t->get(seg);
    }
    t = next->as_table();
    start = dot + 1;
  }
  return *t;
}

}  // namespace troupe::config::detail

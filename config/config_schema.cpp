// The one table of config keys: type, range, allowed values, hot or restart (and the pipeline
// stage a hot change replaces), and the field of the runtime structs (troupe_config) each is read
// into from TOML and written back from, converting units where TOML's differ (seconds to
// std::chrono, MiB to bytes, a name to an enum). Defaults are the fields' own. Ranges are what the code accepts without misbehaving (a port
// fits 16 bits, a thread count is positive), not recommendations; reference.toml says both.
#include "config/config_schema.hpp"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <limits>
#include <type_traits>

#include "config/detail/toml_schema.hpp"
#include "model/matmul.hpp"

namespace troupe::config {

const char* to_string(reload_kind r) { return r == reload_kind::hot ? "hot" : "restart"; }

namespace detail {

namespace {

constexpr int64_t kib = 1024;
constexpr int64_t mib = kib * kib;
constexpr int64_t gib = mib * kib;
constexpr int64_t day_ms = 24LL * 3600 * 1000;

// How a change to a key is applied: at the next start, or while serving by replacing the
// pipeline stage that holds it (config_diff's stages_to_replace collects them).
struct applied_by {
  reload_kind reload;
  const char* stage;
};
constexpr applied_by restart{reload_kind::restart, ""};
constexpr applied_by hot_scheduler{reload_kind::hot, "scheduler"};
constexpr applied_by hot_admission{reload_kind::hot, "admission"};
constexpr applied_by hot_cache{reload_kind::hot, "cache"};
constexpr applied_by hot_streamer{reload_kind::hot, "streamer"};
constexpr applied_by hot_router{reload_kind::hot, "router"};      // its policy, changed in place  // its output filters, changed in place
// Hot, but no stage to replace: serve applies logging.level itself.
constexpr applied_by hot_no_stage{reload_kind::hot, ""};

key_spec spec(std::string key, applied_by a, std::vector<std::string> entries = {}, bool diff_entries = false) {
  key_spec s;
  s.key = std::move(key);
  s.reload = a.reload;
  s.stage = a.stage;
  s.entries = std::move(entries);
  s.diff_entries = diff_entries;
  return s;
}

std::string last_segment(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string parent_of(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

template <class Node>
void put(toml::table& root, const std::string& key, Node&& value) {
  table_at(root, parent_of(key)).insert_or_assign(last_segment(key), std::forward<Node>(value));
}

// The shortest decimal that reads back as the same float: 0.9f prints as 0.9, not 0.899999976.
double shortest(float f) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(f));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return static_cast<double>(f);
}

// Field accessors: `field(c)` is a reference into the config, to a field of a struct the code
// reads. The ranges below keep every value within its field's type.
#define TROUPE_FIELD(path) [](troupe_config& c) -> auto& { return c.path; }

template <class F>
auto& get(F field, const troupe_config& c) {
  return field(const_cast<troupe_config&>(c));
}

template <class F>
key_spec integer_key(std::string key, applied_by a, int64_t lo, int64_t hi, F field) {
  key_spec s = spec(key, a);
  s.read = [key, lo, hi, field](troupe_config& c, const toml::node& n, reader& rd) {
    using T = std::decay_t<decltype(field(c))>;
    if (auto v = rd.integer(n, key, lo, hi)) field(c) = static_cast<T>(*v);
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    put(root, key, static_cast<int64_t>(get(field, c)));
  };
  return s;
}

// A std::chrono duration field, given in whole seconds in TOML (the key's name ends in _s).
template <class F>
key_spec seconds_key(std::string key, applied_by a, int64_t lo, int64_t hi, F field) {
  key_spec s = spec(key, a);
  s.read = [key, lo, hi, field](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto v = rd.integer(n, key, lo, hi)) field(c) = std::chrono::seconds(*v);
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    put(root, key, static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(get(field, c)).count()));
  };
  return s;
}

// A field in bytes, given in MiB in TOML (the key's name ends in _mib).
template <class F>
key_spec mib_key(std::string key, applied_by a, int64_t lo, int64_t hi, F field) {
  key_spec s = spec(key, a);
  s.read = [key, lo, hi, field](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto v = rd.integer(n, key, lo, hi)) field(c) = *v << 20;
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    put(root, key, static_cast<int64_t>(get(field, c) >> 20));
  };
  return s;
}

template <class F>
key_spec number_key(std::string key, applied_by a, double lo, double hi, F field) {
  key_spec s = spec(key, a);
  s.read = [key, lo, hi, field](troupe_config& c, const toml::node& n, reader& rd) {
    using T = std::decay_t<decltype(field(c))>;
    if (auto v = rd.number(n, key, lo, hi)) field(c) = static_cast<T>(*v);
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    const auto v = get(field, c);
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, float>) put(root, key, shortest(v));
    else put(root, key, static_cast<double>(v));
  };
  return s;
}

template <class F>
key_spec bool_key(std::string key, applied_by a, F field) {
  key_spec s = spec(key, a);
  s.read = [key, field](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto v = rd.boolean(n, key)) field(c) = *v;
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    put(root, key, static_cast<bool>(get(field, c)));
  };
  return s;
}

template <class F>
key_spec string_key(std::string key, applied_by a, bool non_empty, std::vector<std::string> allowed, F field,
                    bool secret = false) {
  key_spec s = spec(key, a);
  s.read = [key, non_empty, allowed, field](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto v = rd.string(n, key, non_empty, allowed)) field(c) = *v;
  };
  s.write = [key, field, secret](const troupe_config& c, toml::table& root, bool redact) {
    const std::string& v = get(field, c);
    put(root, key, secret && redact && !v.empty() ? std::string("<redacted>") : v);
  };
  return s;
}

// A list of strings (each non-empty).
template <class F>
key_spec string_list_key(std::string key, applied_by a, F field) {
  key_spec s = spec(key, a);
  s.read = [key, field](troupe_config& c, const toml::node& n, reader& rd) {
    const auto* arr = rd.array(n, key);
    if (!arr) return;
    std::vector<std::string> v;
    for (size_t i = 0; i < arr->size(); ++i)
      if (auto x = rd.string(*arr->get(i), key + "[" + std::to_string(i) + "]", true)) v.push_back(*x);
    field(c) = std::move(v);
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    toml::array arr;
    for (const auto& x : get(field, c)) arr.push_back(x);
    put(root, key, std::move(arr));
  };
  return s;
}

// model.matmul: the enum model::matmul_order, by its name in TOML.
key_spec matmul_key() {
  const std::string key = "model.matmul";
  key_spec s = spec(key, restart);
  s.read = [key](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto v = rd.string(n, key, true, {"llama.cpp", "fast"}))
      c.backend.matmul = model::parse_matmul_order(*v).value_or(model::matmul_order::llama_cpp);
  };
  s.write = [key](const troupe_config& c, toml::table& root, bool) {
    put(root, key, std::string(model::matmul_order_name(c.backend.matmul)));
  };
  return s;
}

// cache.enabled: the response cache and both its policies' own switches, together.
key_spec cache_enabled_key() {
  const std::string key = "cache.enabled";
  key_spec s = spec(key, hot_cache);
  s.read = [key](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto v = rd.boolean(n, key)) {
      auto& cache = c.pipeline.cache;
      cache.enabled = cache.exact.enabled = cache.semantic.enabled = *v;
    }
  };
  s.write = [key](const troupe_config& c, toml::table& root, bool) { put(root, key, c.pipeline.cache.enabled); };
  return s;
}

// The four numbers of a tenant's limits, shared by admission.default_tenant and
// admission.tenants.<name>.
struct limit_field {
  const char* name;
  double actors::tenant_limits::*member;
};
const limit_field limit_fields[] = {
    {"requests_per_s", &actors::tenant_limits::requests_per_s},
    {"request_burst", &actors::tenant_limits::request_burst},
    {"tokens_per_s", &actors::tenant_limits::tokens_per_s},
    {"token_burst", &actors::tenant_limits::token_burst},
};
constexpr double max_rate = 1e12;

std::vector<std::string> limit_names() {
  std::vector<std::string> v;
  for (const auto& f : limit_fields) v.push_back(f.name);
  return v;
}

// A policy's knobs: a table of numbers by name (scheduler.policy_options, router.policy_options).
template <class F>
key_spec number_table_key(std::string key, applied_by a, F field) {
  key_spec s = spec(key, a, {"*"}, true);
  s.read = [key, field](troupe_config& c, const toml::node& n, reader& rd) {
    const auto* t = rd.table(n, key);
    if (!t) return;
    auto& options = field(c);
    options.clear();
    for (const auto& [k, v] : *t) {
      const std::string full = key + "." + std::string(k.str());
      rd.remember(full, v);
      if (auto x = rd.number(v, full, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max()))
        options[std::string(k.str())] = *x;
    }
  };
  s.write = [key, field](const troupe_config& c, toml::table& root, bool) {
    auto& t = table_at(root, key);
    for (const auto& [k, v] : field(const_cast<troupe_config&>(c))) t.insert_or_assign(k, v);
  };
  return s;
}

void read_limits(actors::tenant_limits& out, const toml::table& t, const std::string& prefix, reader& rd) {
  rd.check_keys(t, prefix, limit_names());
  for (const auto& f : limit_fields) {
    if (const auto* v = t.get(f.name)) {
      rd.remember(prefix + "." + f.name, *v);
      if (auto x = rd.number(*v, prefix + "." + f.name, 0, max_rate)) out.*f.member = *x;
    }
  }
}

void write_limits(const actors::tenant_limits& l, toml::table& t) {
  for (const auto& f : limit_fields) t.insert_or_assign(f.name, l.*f.member);
}

key_spec tenants_key() {
  key_spec s = spec("admission.tenants", hot_admission, {}, true);
  for (const auto& f : limit_fields) s.entries.push_back(std::string("*.") + f.name);
  s.read = [](troupe_config& c, const toml::node& n, reader& rd) {
    const std::string key = "admission.tenants";
    const auto* t = rd.table(n, key);
    if (!t) return;
    auto& tenants = c.pipeline.admission.tenants;
    tenants.clear();
    for (const auto& [k, v] : *t) {
      const std::string name(k.str());
      const std::string full = key + "." + name;
      if (name.empty()) {
        rd.fail(v, full, "a tenant needs a name");
        continue;
      }
      const auto* lt = rd.table(v, full);
      if (!lt) continue;
      actors::tenant_limits l;
      read_limits(l, *lt, full, rd);
      tenants[name] = l;
    }
  };
  s.write = [](const troupe_config& c, toml::table& root, bool) {
    auto& t = table_at(root, "admission.tenants");
    for (const auto& [name, l] : c.pipeline.admission.tenants) {
      toml::table lt;
      write_limits(l, lt);
      t.insert_or_assign(name, std::move(lt));
    }
  };
  return s;
}

key_spec limit_key(const limit_field& f) {
  const std::string key = std::string("admission.default_tenant.") + f.name;
  key_spec s = spec(key, hot_admission);
  auto member = f.member;
  s.read = [key, member](troupe_config& c, const toml::node& n, reader& rd) {
    if (auto x = rd.number(n, key, 0, max_rate)) c.pipeline.admission.default_tenant.*member = *x;
  };
  s.write = [key, member](const troupe_config& c, toml::table& root, bool) {
    put(root, key, c.pipeline.admission.default_tenant.*member);
  };
  return s;
}

// Calls `f(table, full_key, node)` for each element of the array of tables at `key`, after
// checking each has only `fields` and holds `required`.
template <class F>
void each_entry(const toml::node& n, const std::string& key, const std::vector<std::string>& fields,
                const char* required, reader& rd, F f) {
  const auto* a = rd.array(n, key);
  if (!a) return;
  for (size_t i = 0; i < a->size(); ++i) {
    const auto& e = *a->get(i);
    const std::string full = key + "[" + std::to_string(i) + "]";
    const auto* t = rd.table(e, full);
    if (!t) continue;
    rd.check_keys(*t, full, fields);
    if (!t->get(required)) rd.fail(e, full, std::string("missing '") + required + "'");
    f(*t, full, e);
  }
}

// auth.api_keys: each entry's key and tenant go to server_options' two parallel lists.
key_spec api_keys_key() {
  key_spec s = spec("auth.api_keys", restart, {"[].key", "[].tenant"});
  s.read = [](troupe_config& c, const toml::node& n, reader& rd) {
    auto& keys = c.server.api_keys;
    auto& tenants = c.server.api_key_tenants;
    keys.clear();
    tenants.clear();
    each_entry(n, "auth.api_keys", {"key", "tenant"}, "key", rd,
               [&](const toml::table& t, const std::string& full, const toml::node& e) {
                 std::string key, tenant;
                 if (const auto* v = t.get("key"))
                   if (auto x = rd.string(*v, full + ".key", true)) key = *x;
                 if (const auto* v = t.get("tenant"))
                   if (auto x = rd.string(*v, full + ".tenant", false)) tenant = *x;
                 for (const auto& earlier : keys)
                   if (!key.empty() && earlier == key) rd.fail(e, full + ".key", "the same API key is listed twice");
                 keys.push_back(std::move(key));
                 tenants.push_back(std::move(tenant));
               });
  };
  s.write = [](const troupe_config& c, toml::table& root, bool redact) {
    toml::array a;
    const auto& keys = c.server.api_keys;
    const auto& tenants = c.server.api_key_tenants;
    for (size_t i = 0; i < keys.size(); ++i) {
      toml::table t;
      t.insert_or_assign("key", redact ? std::string("<redacted>") : keys[i]);
      t.insert_or_assign("tenant", i < tenants.size() ? tenants[i] : std::string());
      a.push_back(std::move(t));
    }
    put(root, "auth.api_keys", std::move(a));
  };
  return s;
}

std::optional<option_value> read_option(const toml::node& n, const std::string& key, reader& rd) {
  if (auto b = n.as_boolean()) return option_value(b->get());
  if (auto i = n.as_integer()) return option_value(i->get());
  if (auto f = n.as_floating_point()) return option_value(f->get());
  if (auto s = n.as_string()) return option_value(s->get());
  if (auto a = n.as_array()) {
    std::vector<std::string> v;
    for (size_t i = 0; i < a->size(); ++i) {
      const auto& e = *a->get(i);
      if (!e.is_string()) {
        rd.fail(e, key + "[" + std::to_string(i) + "]", "expected a string, got " + type_name(e));
        return std::nullopt;
      }
      v.push_back(e.as_string()->get());
    }
    return option_value(std::move(v));
  }
  rd.fail(n, key, "expected a boolean, a number, a string or an array of strings, got " + type_name(n));
  return std::nullopt;
}

// An options table (a filter's, the admission policy's) into a TOML table.
void write_options(const option_map& options, toml::table& o) {
  for (const auto& [k, v] : options) {
    std::visit(
        [&, k = k](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            toml::array arr;
            for (const auto& s : x) arr.push_back(s);
            o.insert_or_assign(k, std::move(arr));
          } else {
            o.insert_or_assign(k, x);
          }
        },
        v);
  }
}

key_spec admission_policy_options_key() {
  key_spec s = spec("admission.policy_options", hot_admission, {"*"}, true);
  s.read = [](troupe_config& c, const toml::node& n, reader& rd) {
    const std::string key = "admission.policy_options";
    const auto* t = rd.table(n, key);
    if (!t) return;
    auto& options = c.pipeline.admission.policy_options;
    options.clear();
    for (const auto& [k, v] : *t) {
      const std::string full = key + "." + std::string(k.str());
      rd.remember(full, v);
      if (auto x = read_option(v, full, rd)) options[std::string(k.str())] = std::move(*x);
    }
  };
  s.write = [](const troupe_config& c, toml::table& root, bool) {
    write_options(c.pipeline.admission.policy_options, table_at(root, "admission.policy_options"));
  };
  return s;
}

key_spec filters_key() {
  key_spec s = spec("streamer.filters", hot_streamer, {"[].name", "[].options.*"});
  s.read = [](troupe_config& c, const toml::node& n, reader& rd) {
    auto& filters = c.pipeline.streamer.filters;
    filters.clear();
    each_entry(n, "streamer.filters", {"name", "options"}, "name", rd,
               [&](const toml::table& t, const std::string& full, const toml::node&) {
                 actors::filter_spec f;
                 if (const auto* v = t.get("name")) {
                   rd.remember(full + ".name", *v);
                   if (auto x = rd.string(*v, full + ".name", true)) f.name = *x;
                 }
                 if (const auto* v = t.get("options")) {
                   rd.remember(full + ".options", *v);
                   if (const auto* ot = rd.table(*v, full + ".options")) {
                     for (const auto& [k, ov] : *ot) {
                       if (auto x = read_option(ov, full + ".options." + std::string(k.str()), rd))
                         f.options[std::string(k.str())] = std::move(*x);
                     }
                   }
                 }
                 filters.push_back(std::move(f));
               });
  };
  s.write = [](const troupe_config& c, toml::table& root, bool) {
    toml::array a;
    for (const auto& f : c.pipeline.streamer.filters) {
      toml::table t;
      t.insert_or_assign("name", f.name);
      toml::table o;
      write_options(f.options, o);
      t.insert_or_assign("options", std::move(o));
      a.push_back(std::move(t));
    }
    put(root, "streamer.filters", std::move(a));
  };
  return s;
}

key_spec plugins_key() {
  key_spec s = spec("plugins", restart);
  s.read = [](troupe_config& c, const toml::node& n, reader& rd) {
    const auto* a = rd.array(n, "plugins");
    if (!a) return;
    c.plugins.clear();
    for (size_t i = 0; i < a->size(); ++i) {
      if (auto x = rd.string(*a->get(i), "plugins[" + std::to_string(i) + "]", true)) c.plugins.push_back(*x);
    }
  };
  s.write = [](const troupe_config& c, toml::table& root, bool) {
    toml::array a;
    for (const auto& p : c.plugins) a.push_back(p);
    root.insert_or_assign("plugins", std::move(a));
  };
  return s;
}

std::vector<key_spec> make_schema() {
  std::vector<key_spec> v;
  // The order of reference.toml.
  v.push_back(plugins_key());

  v.push_back(string_key("server.host", restart, true, {}, TROUPE_FIELD(server.host)));
  v.push_back(integer_key("server.port", restart, 0, 65535, TROUPE_FIELD(server.port)));
  v.push_back(integer_key("server.io_threads", restart, 1, 256, TROUPE_FIELD(server.io_threads)));
  v.push_back(integer_key("server.max_body_bytes", restart, 1, gib, TROUPE_FIELD(server.max_body_bytes)));
  v.push_back(integer_key("server.max_ws_message_bytes", restart, 1, gib, TROUPE_FIELD(server.max_ws_message_bytes)));
  v.push_back(integer_key("server.max_ws_queue_bytes", restart, 1, 16 * gib, TROUPE_FIELD(server.max_ws_queue_bytes)));
  v.push_back(integer_key("server.max_unread_kib", restart, 0, 16 * mib, TROUPE_FIELD(server.max_unread_kib)));
  v.push_back(seconds_key("server.ws_idle_timeout_s", restart, 2, 86400, TROUPE_FIELD(server.ws_idle_timeout)));
  v.push_back(integer_key("server.max_connections", restart, 1, 1 << 24, TROUPE_FIELD(server.max_connections)));
  v.push_back(integer_key("server.max_connections_per_client", restart, 1, 1 << 24,
                          TROUPE_FIELD(server.max_connections_per_client)));
  v.push_back(integer_key("server.max_streams_per_connection", restart, 1, 1 << 20,
                          TROUPE_FIELD(server.max_streams_per_connection)));
  v.push_back(string_list_key("server.allowed_origins", restart, TROUPE_FIELD(server.allowed_origins)));
  v.push_back(string_list_key("server.allowed_hosts", restart, TROUPE_FIELD(server.allowed_hosts)));
  v.push_back(seconds_key("server.http_read_timeout_s", restart, 1, 3600, TROUPE_FIELD(server.http_read_timeout)));
  v.push_back(seconds_key("server.shutdown_grace_s", restart, 0, 3600, TROUPE_FIELD(server.shutdown_grace)));
  v.push_back(seconds_key("server.resume_window_s", restart, 0, 86400, TROUPE_FIELD(server.resume_window)));
  v.push_back(integer_key("server.resume_keep_tokens", restart, 0, 16 * mib, TROUPE_FIELD(server.resume_keep_tokens)));
  v.push_back(string_key("server.tls_cert", restart, false, {}, TROUPE_FIELD(server.tls_cert)));
  v.push_back(string_key("server.tls_key", restart, false, {}, TROUPE_FIELD(server.tls_key)));

  v.push_back(string_key("model.path", restart, true, {}, TROUPE_FIELD(model.path)));
  v.push_back(string_key("model.name", restart, false, {}, TROUPE_FIELD(model.name)));
  v.push_back(string_key("model.backend", restart, true, {}, TROUPE_FIELD(model.backend)));
  v.push_back(integer_key("model.threads", restart, 0, 1024, TROUPE_FIELD(backend.n_threads)));
  v.push_back(bool_key("model.cuda_graphs", restart, TROUPE_FIELD(backend.cuda_graphs)));
  v.push_back(bool_key("model.parse_special_in_messages", restart, TROUPE_FIELD(pipeline.text.parse_special_in_messages)));
  v.push_back(matmul_key());

  v.push_back(mib_key("kv.memory_mib", restart, 1, mib, TROUPE_FIELD(backend.kv_bytes)));
  v.push_back(integer_key("kv.block_size", restart, 1, 1024, TROUPE_FIELD(backend.block_size)));
  v.push_back(bool_key("kv.f32", restart, TROUPE_FIELD(backend.kv_f32)));
  v.push_back(bool_key("kv.q8", restart, TROUPE_FIELD(backend.kv_q8)));
  v.push_back(bool_key("kv.prefix_caching", restart, TROUPE_FIELD(pipeline.scheduler.prefix_caching)));

  v.push_back(string_key("scheduler.policy", hot_scheduler, true, {}, TROUPE_FIELD(pipeline.scheduler.policy)));
  v.push_back(integer_key("scheduler.max_num_seqs", hot_scheduler, 1, 65536, TROUPE_FIELD(pipeline.scheduler.max_num_seqs)));
  v.push_back(integer_key("scheduler.max_batched_tokens", hot_scheduler, 1, mib,
                          TROUPE_FIELD(pipeline.scheduler.max_batched_tokens)));
  v.push_back(integer_key("scheduler.max_steps_in_flight", hot_scheduler, 1, 16,
                          TROUPE_FIELD(pipeline.scheduler.max_steps_in_flight)));
  v.push_back(number_table_key("scheduler.policy_options", hot_scheduler,
                               [](troupe_config& c) -> auto& { return c.pipeline.scheduler.policy_opts.values; }));

  v.push_back(string_key("speculative.method", hot_scheduler, true, {}, TROUPE_FIELD(pipeline.scheduler.speculative.method)));
  v.push_back(integer_key("speculative.k", hot_scheduler, 1, 32, TROUPE_FIELD(pipeline.scheduler.speculative.k)));
  v.push_back(integer_key("speculative.ngram_min", hot_scheduler, 1, 64, TROUPE_FIELD(pipeline.scheduler.speculative.ngram_min)));
  v.push_back(integer_key("speculative.ngram_max", hot_scheduler, 1, 64, TROUPE_FIELD(pipeline.scheduler.speculative.ngram_max)));
  v.push_back(number_key("speculative.min_acceptance", hot_scheduler, 0.0, 1.0,
                         TROUPE_FIELD(pipeline.scheduler.speculative.min_acceptance)));
  v.push_back(integer_key("speculative.probe_steps", hot_scheduler, 1, 1 << 20,
                          TROUPE_FIELD(pipeline.scheduler.speculative.probe_steps)));
  v.push_back(integer_key("speculative.max_batch", hot_scheduler, 0, 65536, TROUPE_FIELD(pipeline.scheduler.speculative.max_batch)));
  v.push_back(bool_key("speculative.cost_rule", hot_scheduler, TROUPE_FIELD(pipeline.scheduler.speculative.cost_rule)));
  v.push_back(string_key("speculative.draft_model", hot_scheduler, false, {}, TROUPE_FIELD(pipeline.scheduler.speculative.draft_model)));
  v.push_back(integer_key("speculative.draft_threads", hot_scheduler, 0, 1024, TROUPE_FIELD(pipeline.scheduler.speculative.draft_threads)));
  v.push_back(mib_key("speculative.draft_kv_mib", hot_scheduler, 1, mib, TROUPE_FIELD(pipeline.scheduler.speculative.draft_kv_bytes)));

  v.push_back(string_key("admission.policy", hot_admission, true, {}, TROUPE_FIELD(pipeline.admission.policy)));
  v.push_back(integer_key("admission.max_pending", hot_admission, 1, 16 * mib, TROUPE_FIELD(pipeline.admission.max_pending)));
  v.push_back(integer_key("admission.max_pending_per_tenant", hot_admission, 0, 16 * mib,
                          TROUPE_FIELD(pipeline.admission.max_pending_per_tenant)));
  v.push_back(integer_key("admission.max_prompt_tokens", hot_admission, 0, 16 * mib,
                          TROUPE_FIELD(pipeline.admission.max_prompt_tokens)));
  v.push_back(integer_key("admission.max_tokens_cap", hot_admission, 1, 16 * mib,
                          TROUPE_FIELD(pipeline.admission.max_tokens_cap)));
  v.push_back(integer_key("admission.default_max_tokens", hot_admission, 1, 16 * mib,
                          TROUPE_FIELD(pipeline.admission.default_max_tokens)));
  // At most 4: the request parser refuses more, as OpenAI does (net/detail/request_reader.hpp's
  // max_stop_strings), so a larger value could only mislead; this key can lower the limit.
  v.push_back(integer_key("admission.max_stop_strings", hot_admission, 0, 4,
                          TROUPE_FIELD(pipeline.admission.max_stop_strings)));
  v.push_back(integer_key("admission.default_deadline_ms", hot_admission, 0, 365 * day_ms,
                          TROUPE_FIELD(pipeline.admission.default_deadline_ms)));
  v.push_back(admission_policy_options_key());
  for (const auto& f : limit_fields) v.push_back(limit_key(f));
  v.push_back(tenants_key());

  v.push_back(cache_enabled_key());
  v.push_back(string_key("cache.policy", hot_cache, true, {}, TROUPE_FIELD(pipeline.cache.policy)));
  v.push_back(bool_key("cache.share_across_tenants", hot_cache, TROUPE_FIELD(pipeline.cache.share_across_tenants)));
  v.push_back(number_key("cache.threshold", hot_cache, 0.0, 1.0, TROUPE_FIELD(pipeline.cache.semantic.threshold)));
  v.push_back(integer_key("cache.ttl_s", hot_cache, 0, 100LL * 365 * 86400, TROUPE_FIELD(pipeline.cache.semantic.ttl_s)));
  v.push_back(integer_key("cache.max_entries", hot_cache, 1, 1LL << 32, TROUPE_FIELD(pipeline.cache.semantic.max_entries)));
  v.push_back(integer_key("cache.max_bytes", hot_cache, 1, 1LL << 50, TROUPE_FIELD(pipeline.cache.semantic.max_bytes)));
  v.push_back(integer_key("cache.max_question_bytes", hot_cache, 1, 16 * mib,
                          TROUPE_FIELD(pipeline.cache.semantic.max_question_bytes)));
  v.push_back(bool_key("cache.semantic_for_truncated", hot_cache, TROUPE_FIELD(pipeline.cache.semantic.semantic_for_truncated)));
  v.push_back(bool_key("cache.lexical_guards", hot_cache, TROUPE_FIELD(pipeline.cache.semantic.lexical_guards)));
  v.push_back(integer_key("cache.exact_max_entries", hot_cache, 1, 1LL << 32, TROUPE_FIELD(pipeline.cache.exact.max_entries)));
  v.push_back(string_key("cache.path", restart, true, {}, TROUPE_FIELD(pipeline.cache.semantic.path)));
  v.push_back(bool_key("cache.sync_writes", restart, TROUPE_FIELD(pipeline.cache.semantic.sync_writes)));
  v.push_back(integer_key("cache.min_free_disk_mib", restart, 0, 1LL << 30,
                          TROUPE_FIELD(pipeline.cache.semantic.min_free_disk_mib)));
  v.push_back(string_key("cache.embedder", restart, true, {}, TROUPE_FIELD(pipeline.cache.semantic.embedder)));
  v.push_back(string_key("cache.embedder_options.model_dir", restart, false, {},
                         TROUPE_FIELD(pipeline.cache.semantic.embedder_opts.model_dir)));
  v.push_back(integer_key("cache.embedder_options.threads", restart, 0, 1024,
                          TROUPE_FIELD(pipeline.cache.semantic.embedder_opts.n_threads)));
  v.push_back(integer_key("cache.embedder_options.max_tokens", restart, 1, 8192,
                          TROUPE_FIELD(pipeline.cache.semantic.embedder_opts.max_tokens)));
  v.push_back(string_key("cache.embedder_options.weights", restart, true, {"f32", "f16", "q8_0"},
                         TROUPE_FIELD(pipeline.cache.semantic.embedder_opts.weights)));
  v.push_back(integer_key("cache.embedder_options.dimension", restart, 1, 65536,
                          TROUPE_FIELD(pipeline.cache.semantic.embedder_opts.dimension)));
  v.push_back(integer_key("cache.index.flat_limit", restart, 0, 1LL << 32, TROUPE_FIELD(pipeline.cache.semantic.index.flat_limit)));
  v.push_back(integer_key("cache.index.hnsw_m", restart, 2, 256, TROUPE_FIELD(pipeline.cache.semantic.index.hnsw_m)));
  v.push_back(integer_key("cache.index.ef_construction", restart, 1, 10000,
                          TROUPE_FIELD(pipeline.cache.semantic.index.ef_construction)));
  v.push_back(integer_key("cache.index.ef_search", restart, 1, 10000, TROUPE_FIELD(pipeline.cache.semantic.index.ef_search)));

  v.push_back(integer_key("streamer.buffer_tokens", restart, 0, mib, TROUPE_FIELD(pipeline.streamer.buffer_tokens)));
  v.push_back(integer_key("streamer.slow_consumer_timeout_ms", restart, 1, day_ms,
                          TROUPE_FIELD(pipeline.streamer.slow_consumer_timeout_ms)));
  v.push_back(integer_key("streamer.filter_timeout_ms", restart, 1, day_ms,
                          TROUPE_FIELD(pipeline.streamer.filter_timeout_ms)));
  v.push_back(filters_key());

  v.push_back(string_key("router.policy", hot_router, true, {}, TROUPE_FIELD(pipeline.router.policy)));
  v.push_back(number_table_key("router.policy_options", hot_router,
                               [](troupe_config& c) -> auto& { return c.pipeline.router.policy_opts.values; }));

  v.push_back(string_key("cluster.listen", restart, false, {}, TROUPE_FIELD(cluster.listen)));
  v.push_back(bool_key("cluster.local_replica", restart, TROUPE_FIELD(pipeline.router.use_local)));
  v.push_back(integer_key("cluster.dead_after_ms", hot_router, 50, day_ms, TROUPE_FIELD(pipeline.router.dead_after_ms)));
  v.push_back(integer_key("cluster.report_ms", restart, 10, 60000, TROUPE_FIELD(pipeline.router.report_ms)));
  v.push_back(string_key("cluster.secret", restart, false, {}, TROUPE_FIELD(pipeline.router.secret), true));
  v.push_back(string_key("cluster.tls_certificate", restart, false, {}, TROUPE_FIELD(cluster.tls_certificate)));
  v.push_back(string_key("cluster.tls_key", restart, false, {}, TROUPE_FIELD(cluster.tls_key)));
  v.push_back(string_key("cluster.tls_ca", restart, false, {}, TROUPE_FIELD(cluster.tls_ca)));

  v.push_back(api_keys_key());
  v.push_back(string_key("auth.admin_token", restart, false, {}, TROUPE_FIELD(server.admin_token), true));

  v.push_back(string_key("logging.level", hot_no_stage, true, {"trace", "debug", "info", "warn", "error", "critical", "off"},
                         TROUPE_FIELD(logging.level)));

  v.push_back(integer_key("supervisor.step_timeout_ms", restart, 1, day_ms, TROUPE_FIELD(pipeline.step_timeout_ms)));
  v.push_back(integer_key("supervisor.startup_timeout_ms", restart, 1, day_ms, TROUPE_FIELD(pipeline.startup_timeout_ms)));
  v.push_back(integer_key("supervisor.max_restarts", restart, 0, 1000000, TROUPE_FIELD(pipeline.max_restarts)));
  v.push_back(integer_key("supervisor.restart_window_ms", restart, 1, day_ms, TROUPE_FIELD(pipeline.restart_window_ms)));
  return v;
}

#undef TROUPE_FIELD

// Edits (insert, delete, replace, swap two neighbours) from a to b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

const std::vector<key_spec>& schema() {
  static const std::vector<key_spec> s = make_schema();
  return s;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    const size_t limit = std::max<size_t>(1, std::max(word.size(), c.size()) / 3);
    // One a prefix of the other ("warning" / "warn", "max_seqs" / "max_seqs_total") is a
    // likely slip even when many letters differ.
    const size_t common = std::min(word.size(), c.size());
    const bool prefix = common >= 3 && word.compare(0, common, c, 0, common) == 0;
    if (prefix) d = std::min(d, limit);
    if (d <= limit && d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

}  // namespace detail

// --- public side ----------------------------------------------------------------------------

const std::vector<config_key>& config_keys() {
  static const std::vector<config_key> keys = [] {
    std::vector<config_key> out;
    for (const auto& s : detail::schema()) {
      out.push_back({s.key, s.reload, s.stage});
      for (const auto& e : s.entries)
        out.push_back({s.key + (e.rfind("[]", 0) == 0 ? "" : ".") + e, s.reload, s.stage});
    }
    return out;
  }();
  return keys;
}

namespace {

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    auto dot = key.find('.', start);
    out.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

}  // namespace

bool key_matches(const std::string& pattern, const std::string& key) {
  const auto p = split_key(pattern), k = split_key(key);
  if (p.size() != k.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != k[i]) return false;
  return true;
}

namespace {

// The schema key that is `key` or holds it ("admission.tenants" holds
// "admission.tenants.alice.tokens_per_s"; "auth.api_keys" holds "auth.api_keys[1].key").
const detail::key_spec* holder_of(const std::string& key) {
  for (const auto& s : detail::schema()) {
    if (key == s.key) return &s;
    if (key.size() > s.key.size() && key.compare(0, s.key.size(), s.key) == 0 &&
        (key[s.key.size()] == '.' || key[s.key.size()] == '['))
      return &s;
  }
  return nullptr;
}

}  // namespace

reload_kind reload_of(const std::string& key) {
  const auto* s = holder_of(key);
  return s ? s->reload : reload_kind::restart;
}

std::string stage_of(const std::string& key) {
  const auto* s = holder_of(key);
  return s && s->reload == reload_kind::hot ? s->stage : std::string();
}

}  // namespace troupe::config

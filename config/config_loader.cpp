#include "config/config_loader.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/scheduler/speculative/draft.hpp"
#include "common/file_kind.hpp"
#include "config/detail/toml_key_depth.hpp"
#include "config/detail/toml_schema.hpp"

namespace troupe::config {

// Not an ifstream: it opens a directory and then reads nothing without an error, and an empty
// text is a valid config (every default), so a directory passed for the file would load as one.
// Regular files only: a named pipe would block startup, or a reload for good, until something
// wrote to it (O_NONBLOCK lets the open return so that fstat can refuse it).
result<std::string> read_config_text(const std::string& path) {
  auto failed = [&](int e) { return make_error("cannot read config file '" + path + "': " + std::strerror(e)); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return failed(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return failed(e);
  }
  // A config is a few KB; toml++ took 2.6 GB and 36 s over a 10 MB key. Checked again as
  // it is read (the file may grow meanwhile).
  constexpr size_t max_bytes = size_t{1} << 20;
  const auto too_large = [&] {
    return make_error("config file '" + path + "' is larger than 1 MiB: not a config");
  };
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return too_large();
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) return failed(EISDIR);
    return make_error("cannot read config file '" + path + "': it is " + file_kind(st.st_mode) +
                      ", not a regular file");
  }
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > max_bytes) {
        ::close(fd);
        return too_large();
      }
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int e = errno;
      ::close(fd);
      return failed(e);
    }
  }
  ::close(fd);
  return text;
}

namespace {

using detail::reader;

std::string parse_error_text(const toml::parse_error& e, const std::string& fallback) {
  const auto& at = e.source();
  std::string path = at.path && !at.path->empty() ? *at.path : fallback;
  std::string where = path;
  if (path.rfind("--", 0) != 0 && at.begin.line > 0)
    where += ":" + std::to_string(at.begin.line) + ":" + std::to_string(at.begin.column);
  return where + ": " + std::string(e.description());
}

// Tables are merged key by key; anything else is replaced. Nodes are moved, so they keep the
// source (file and line, or the flag) they were read from.
void merge(toml::table& base, toml::table&& over) {
  for (auto&& [k, v] : over) {
    auto* b = base.get(k.str());
    if (b && b->is_table() && v.is_table()) merge(*b->as_table(), std::move(*v.as_table()));
    else base.insert_or_assign(k, std::move(v));
  }
}

result<toml::table> parse_override(const config_override& o) {
  if (auto e = detail::key_depth_error(o.key + " = " + o.value, o.origin)) return make_error(*e);
  try {
    return toml::parse(o.key + " = " + o.value, o.origin);
  } catch (const toml::parse_error& first) {
    // Not a TOML value: take the text as a string (--set model.path=models/x.gguf). If the key
    // is the problem, this fails too, and the first error says why.
    try {
      return toml::parse(o.key + " = " + detail::quote(o.value), o.origin);
    } catch (const toml::parse_error&) {
      return make_error(parse_error_text(first, o.origin));
    }
  }
}

// The sections and sub-tables of the schema, each with the names that may appear in it.
const std::map<std::string, std::vector<std::string>>& tables() {
  static const auto t = [] {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& s : detail::schema()) {
      std::string parent;
      size_t start = 0;
      for (;;) {
        const auto dot = s.key.find('.', start);
        const std::string seg = s.key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        auto& names = out[parent];
        if (std::find(names.begin(), names.end(), seg) == names.end()) names.push_back(seg);
        if (dot == std::string::npos) break;
        parent = s.key.substr(0, dot);
        start = dot + 1;
      }
    }
    return out;
  }();
  return t;
}

const detail::key_spec* spec_of(const std::string& key) {
  for (const auto& s : detail::schema())
    if (s.key == key) return &s;
  return nullptr;
}

void walk(const toml::table& t, const std::string& prefix, reader& rd, troupe_config& c) {
  const auto& known = tables().at(prefix);
  rd.check_keys(t, prefix, known);
  for (const auto& [k, v] : t) {
    const std::string name(k.str());
    if (std::find(known.begin(), known.end(), name) == known.end()) continue;
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (const auto* spec = spec_of(full)) {
      rd.remember(full, v);
      spec->read(c, v, rd);
    } else if (const auto* sub = rd.table(v, full)) {
      walk(*sub, full, rd, c);
    }
  }
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

void check_name(reader& rd, const config_registries::names_fn& names, const char* kind, const std::string& key,
                const std::string& value) {
  if (!names) return;
  const auto known = names();
  if (std::find(known.begin(), known.end(), value) != known.end()) return;
  std::string msg = std::string("unknown ") + kind + " '" + value + "' (known: " +
                    (known.empty() ? std::string("none") : join(known)) + ")";
  if (auto c = detail::closest(value, known); !c.empty()) msg += "; did you mean '" + c + "'?";
  rd.fail_key(key, msg);
}

void check(const troupe_config& c, const config_registries& r, reader& rd) {
  const auto& p = c.pipeline;
  check_name(rd, r.scheduler_policies, "scheduling policy", "scheduler.policy", p.scheduler.policy);
  check_name(rd, r.router_policies, "routing policy", "router.policy", p.router.policy);
  check_name(rd, r.admission_policies, "admission policy", "admission.policy", p.admission.policy);
  check_name(rd, r.cache_policies, "response cache policy", "cache.policy", p.cache.policy);
  check_name(rd, r.embedders, "embedder", "cache.embedder", p.cache.semantic.embedder);
  check_name(rd, r.backends, "backend", "model.backend", c.model.backend);
  check_name(rd, r.speculative_methods, "speculative method", "speculative.method", p.scheduler.speculative.method);
  for (size_t i = 0; i < p.streamer.filters.size(); ++i)
    check_name(rd, r.filters, "output filter", "streamer.filters[" + std::to_string(i) + "].name",
               p.streamer.filters[i].name);
  // A policy's refusal of its options points at the option when the message names one.
  auto check_options = [&rd](const auto& check, const std::string& section, const std::string& policy,
                             const auto& options) {
    if (!check) return;
    auto s = check(policy, options);
    if (s) return;
    std::string key = section + ".policy_options";
    for (const auto& [name, v] : options)
      if (s.error().find("'" + name + "'") != std::string::npos) key += "." + name;
    if (!rd.node_of(key)) key = rd.node_of(section + ".policy_options") ? section + ".policy_options" : section + ".policy";
    rd.fail_key(key, s.error());
  };
  check_options(r.scheduler_policy_options, "scheduler", p.scheduler.policy, p.scheduler.policy_opts.values);
  check_options(r.router_policy_options, "router", p.router.policy, p.router.policy_opts.values);
  check_options(r.admission_policy_options, "admission", p.admission.policy, p.admission.policy_options);
  if (r.filter_options) {
    for (size_t i = 0; i < p.streamer.filters.size(); ++i) {
      const auto& f = p.streamer.filters[i];
      if (auto s = r.filter_options(f.name, f.options); !s) {
        const std::string at = "streamer.filters[" + std::to_string(i) + "]";
        rd.fail_key(rd.node_of(at + ".options") ? at + ".options" : at + ".name", s.error());
      }
    }
  }
  // Keys that must agree: only once each was read well (a key that failed keeps its default,
  // which would only confuse here).
  if (!rd.errors().empty()) return;
  if (p.scheduler.speculative.ngram_min > p.scheduler.speculative.ngram_max)
    rd.fail_key("speculative.ngram_min", "speculative.ngram_min (" + std::to_string(p.scheduler.speculative.ngram_min) +
                                             ") exceeds speculative.ngram_max (" +
                                             std::to_string(p.scheduler.speculative.ngram_max) + ")");
  if (const auto& sp = p.scheduler.speculative; sp.method == "draft" && sp.draft_model.empty())
    rd.fail_key("speculative.method", "speculative.draft_model is required with speculative.method = \"draft\" "
                                      "(a smaller GGUF model with the model's vocabulary)");
  else if (!sp.draft_model.empty())
    if (auto s = actors::proposers::check_draft_model(sp.draft_model, c.model.path); !s)
      rd.fail_key("speculative.draft_model", s.error());
  if (p.admission.default_max_tokens > p.admission.max_tokens_cap)
    rd.fail_key(rd.node_of("admission.default_max_tokens") ? "admission.default_max_tokens" : "admission.max_tokens_cap",
                "admission.default_max_tokens (" + std::to_string(p.admission.default_max_tokens) +
                    ") exceeds admission.max_tokens_cap (" + std::to_string(p.admission.max_tokens_cap) + ")");
  // A replica reports every report_ms: dead after less than two reports' time, an idle worker
  // flaps (declared dead, rejoins under a new id) at every late report.
  if (const auto& rc = p.router; rc.dead_after_ms < 2 * rc.report_ms)
    rd.fail_key(rd.node_of("cluster.dead_after_ms") ? "cluster.dead_after_ms" : "cluster.report_ms",
                "cluster.dead_after_ms (" + std::to_string(rc.dead_after_ms) + ") must be at least twice cluster.report_ms (" +
                    std::to_string(rc.report_ms) + "): a replica is declared dead after missing reports, not one");
  if (c.backend.kv_f32 && c.backend.kv_q8)
    rd.fail_key("kv.q8", "kv memory is either f32 or q8 (kv.f32, kv.q8), not both");
  // TLS for the HTTP port: a certificate and its key, both readable (serve found out only after
  // it had started listening).
  if (c.server.tls_cert.empty() != c.server.tls_key.empty())
    rd.fail_key(c.server.tls_cert.empty() ? "server.tls_key" : "server.tls_cert",
                "server.tls_cert and server.tls_key go together: set both or neither");
  for (const auto& [key, path] : {std::pair{"server.tls_cert", &c.server.tls_cert}, {"server.tls_key", &c.server.tls_key}})
    if (!path->empty() && ::access(path->c_str(), R_OK) != 0)
      rd.fail_key(key, "cannot read '" + *path + "': " + std::strerror(errno));
  // The admin token opens /admin/*: an API key that equals it would open them to a client.
  const auto& keys = c.server.api_keys;
  if (!c.server.admin_token.empty() && std::find(keys.begin(), keys.end(), c.server.admin_token) != keys.end())
    rd.fail_key("auth.admin_token", "auth.admin_token equals one of auth.api_keys: give the admin its own token");
  // An unnamed key's tenant is "key<its index>": a tenant named so on another key would share its
  // rate buckets, quotas and cache scope without saying so.
  for (size_t i = 0; i < c.server.api_key_tenants.size(); ++i) {
    const std::string& t = c.server.api_key_tenants[i];
    if (t.size() > 3 && t.compare(0, 3, "key") == 0 && t != "key" + std::to_string(i) &&
        std::all_of(t.begin() + 3, t.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      rd.fail_key("auth.api_keys", "auth.api_keys[" + std::to_string(i) + "].tenant '" + t +
                                       "' is the name an unnamed key gets (key<its index>): name this tenant otherwise");
  }
}

}  // namespace

result<config_override> parse_set(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    return make_error("--set " + arg + ": expected section.key=value (e.g. scheduler.max_num_seqs=16)");
  std::string key = arg.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  return config_override{key, arg.substr(eq + 1), "--set " + arg};
}

result<troupe_config> parse_config(std::string_view text, const std::string& source_name,
                                   const std::vector<config_override>& overrides,
                                   const config_registries& registries) {
  toml::table root;
  if (auto e = detail::key_depth_error(text, source_name)) return make_error(*e);
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    return make_error(parse_error_text(e, source_name));
  }
  for (const auto& o : overrides) {
    auto t = parse_override(o);
    if (!t) return make_error(t.error());
    merge(root, std::move(t.value()));
  }
  reader rd(source_name);
  troupe_config c;
  walk(root, "", rd, c);
  check(c, registries, rd);
  if (!rd.errors().empty()) return make_error(join(rd.errors(), "\n"));
  return c;
}

result<troupe_config> load_config(const std::string& path, const std::vector<config_override>& overrides,
                                  const config_registries& registries) {
  auto text = read_config_text(path);
  if (!text) return make_error(text.error());
  return parse_config(text.value(), path, overrides, registries);
}

std::string to_toml(const troupe_config& c, secrets s) {
  toml::table root;
  for (const auto& spec : detail::schema()) spec.write(c, root, s == secrets::redact);
  return detail::write_document(root);
}

std::string default_config_path(const std::string& exe_path) {
  auto exists = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  auto dir_of = [](const std::string& p) {
    const auto slash = p.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
  };
  std::vector<std::string> candidates;
  if (!exe_path.empty()) {
    const std::string d = dir_of(exe_path);
    candidates.push_back(d + "/config/troupe.toml");     // an installed layout
    candidates.push_back(d + "/../config/troupe.toml");  // build/troupe in the repository
  }
  // This file is config/config_loader.cpp of the source tree the binary was built from.
  const std::string self = __FILE__;
  if (!self.empty() && self[0] == '/') candidates.push_back(dir_of(self) + "/troupe.toml");
  candidates.push_back("config/troupe.toml");
  for (const auto& c : candidates) {
    if (!exists(c)) continue;
    char buf[PATH_MAX];
    return ::realpath(c.c_str(), buf) ? std::string(buf) : c;
  }
  return {};
}

result<located_config> resolve_config(const std::string& path, const std::string& exe_path,
                                      const std::vector<config_override>& overrides,
                                      const config_registries& registries) {
  const std::string file = path.empty() ? default_config_path(exe_path) : path;
  auto c = file.empty() ? parse_config("", "built-in defaults", overrides, registries)
                        : load_config(file, overrides, registries);
  if (!c) return make_error(c.error());
  return located_config{std::move(c.value()), file.empty() ? std::string("built-in defaults") : file};
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace troupe::config

// `troupe serve`: the pipeline behind an HTTP/WebSocket server (OpenAI-compatible API, the
// WebSocket protocol of docs/protocol.md, /health, /metrics, a chat page at /), configured by a
// TOML file (config/reference.toml documents every key) and command-line overrides.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/command.hpp"
#include "config/config_loader.hpp"
#include "config/config_plugins.hpp"
#include "config/config_reloader.hpp"
#include "config/serve_flags.hpp"
#include "net/json_writer.hpp"
#include "app/serve/serve.hpp"

namespace {

namespace cfg = troupe::config;

struct serve_args {
  std::string config;
  std::vector<std::string> sets;
  // The flags that stand for keys; they count only when given (see serve_flags).
  std::string listen, model, model_name;
  int64_t threads = 0, backend_threads = 0, kv_mb = 0, max_seqs = 0, max_body = 0, max_ws_message = 0, ws_idle = 0,
          resume_window = 0;
  std::vector<std::string> api_keys;
  bool no_cache = false;
};

void write_changes(troupe::net::json_writer& w, const char* name, const std::vector<cfg::config_change>& changes) {
  w.key(name).begin_array();
  for (const auto& c : changes)
    w.begin_object().field("key", c.key).field("old", c.old_value).field("new", c.new_value).end_object();
  w.end_array();
}

std::string workers_text(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// POST /admin/reload, GET /admin/config and SIGHUP, over the config reloader.
troupe::net::inference::admin_reply admin_action(cfg::config_reloader& reloader, troupe::app::serve_instance& inst,
                                                 const std::string& action) {
  troupe::net::json_writer w;
  if (action == "config") {
    w.begin_object().field("version", reloader.version()).field("source", reloader.source().empty() ? "(default)" : reloader.source());
    w.field("config", cfg::to_toml(reloader.active(), cfg::secrets::redact));
    write_changes(w, "pending_restart", reloader.pending_restart());
    w.end_object();
    return {200, w.take()};
  }
  if (action != "reload") return {404, R"({"error":{"message":"unknown admin action","code":"not_found"}})"};
  auto r = reloader.reload([&](const cfg::troupe_config& next, const std::set<std::string>& stages) {
    auto swapped = inst.reconfigure(next.pipeline, stages);
    if (swapped) {
      const auto level = spdlog::level::from_str(next.logging.level);
      if (level != spdlog::get_level()) {
        spdlog::info("troupe: log level {} -> {}", spdlog::level::to_string_view(spdlog::get_level()), next.logging.level);
        spdlog::set_level(level);
      }
    }
    return swapped;
  });
  // A worker runs its own scheduler from its own config: the reply names the workers that the
  // scheduler keys applied here did not reach.
  std::vector<std::string> workers;
  if (r.ok && std::any_of(r.applied.begin(), r.applied.end(), [](const cfg::config_change& c) {
        return c.key.rfind("scheduler.", 0) == 0;
      }))
    workers = inst.workers();
  if (r.ok) {
    std::string keys;
    for (const auto& c : r.applied) keys += (keys.empty() ? "" : ", ") + c.key;
    spdlog::info("troupe: config reloaded: version {}; applied: {}; replaced: {} actor(s); {} key(s) wait for a restart",
                 r.version, keys.empty() ? "nothing" : keys, r.replaced.size(), r.restart_needed.size());
    for (const auto& c : r.restart_needed)
      spdlog::warn("troupe: config key {} changed ({} -> {}) but needs a restart", c.key, c.old_value, c.new_value);
    if (!workers.empty())
      spdlog::warn("troupe: the scheduler keys applied to this process's replica only: workers {} each reload their "
                   "own config on SIGHUP", workers_text(workers));
  } else {
    spdlog::error("troupe: {}", r.error);
  }
  w.begin_object().field("ok", r.ok).field("version", r.version);
  if (!r.ok) w.field("error", r.error);
  write_changes(w, "applied", r.applied);
  write_changes(w, "restart_needed", r.restart_needed);
  w.key("replaced").begin_array();
  for (const auto& n : r.replaced) w.value(n);
  w.end_array();
  if (!workers.empty()) {
    w.key("not_applied_on_workers").begin_array();
    for (const auto& n : workers) w.value(n);
    w.end_array();
    w.field("workers_note", "scheduler keys were applied to this process's replica only; each worker reloads its own "
                            "config on SIGHUP (troupe worker)");
  }
  w.end_object();
  return {r.ok ? 200 : 400, w.take()};
}

int fail(const std::string& m) {
  std::fprintf(stderr, "troupe serve: %s\n", m.c_str());
  return 2;
}

troupe::app::register_command reg("serve", "Serve the model over HTTP (OpenAI-compatible) and WebSocket", [](CLI::App& sub) {
  auto a = std::make_shared<serve_args>();
  sub.add_option("--config,-c", a->config,
                 "TOML config file (default: the repository's config/troupe.toml; keys: config/reference.toml)");
  sub.add_option("--set", a->sets, "override a key: section.key=VALUE, VALUE in TOML (repeatable; applied last)")
      ->allow_extra_args(false);
  // Each flag below is a shorthand for the key it names; given, it overrides the file.
  std::vector<std::pair<CLI::Option*, std::function<void(cfg::serve_flags&)>>> flags;
  auto flag = [&](CLI::Option* o, std::function<void(cfg::serve_flags&)> set) { flags.emplace_back(o, std::move(set)); };
  flag(sub.add_option("--listen", a->listen, "HOST:PORT (server.host, server.port; port 0: any free port)"),
       [a](cfg::serve_flags& f) { f.listen = a->listen; });
  flag(sub.add_option("--model,-m", a->model, "GGUF model file (model.path)"),
       [a](cfg::serve_flags& f) { f.model = a->model; });
  flag(sub.add_option("--model-name", a->model_name, "name clients use in 'model' (model.name)"),
       [a](cfg::serve_flags& f) { f.model_name = a->model_name; });
  flag(sub.add_option("--threads", a->threads, "I/O threads (server.io_threads)"),
       [a](cfg::serve_flags& f) { f.threads = a->threads; });
  flag(sub.add_option("--backend-threads", a->backend_threads, "engine threads, 0: all cores (model.threads)"),
       [a](cfg::serve_flags& f) { f.backend_threads = a->backend_threads; });
  flag(sub.add_option("--api-key", a->api_keys, "accepted API key, repeatable (auth.api_keys)"),
       [a](cfg::serve_flags& f) { f.api_keys = a->api_keys; });
  flag(sub.add_option("--kv-mb", a->kv_mb, "KV memory, MiB (kv.memory_mib)"),
       [a](cfg::serve_flags& f) { f.kv_mb = a->kv_mb; });
  flag(sub.add_option("--max-seqs", a->max_seqs, "sequences decoded together (scheduler.max_num_seqs)"),
       [a](cfg::serve_flags& f) { f.max_seqs = a->max_seqs; });
  flag(sub.add_option("--max-body", a->max_body, "largest HTTP body, bytes (server.max_body_bytes)"),
       [a](cfg::serve_flags& f) { f.max_body = a->max_body; });
  flag(sub.add_option("--max-ws-message", a->max_ws_message, "largest WebSocket message, bytes (server.max_ws_message_bytes)"),
       [a](cfg::serve_flags& f) { f.max_ws_message = a->max_ws_message; });
  flag(sub.add_option("--ws-idle", a->ws_idle, "WebSocket idle timeout, s (server.ws_idle_timeout_s)"),
       [a](cfg::serve_flags& f) { f.ws_idle = a->ws_idle; });
  flag(sub.add_option("--resume-window", a->resume_window, "seconds streams stay resumable (server.resume_window_s)"),
       [a](cfg::serve_flags& f) { f.resume_window = a->resume_window; });
  flag(sub.add_flag("--no-cache", a->no_cache, "disable the response cache (cache.enabled = false)"),
       [a](cfg::serve_flags& f) { f.no_cache = a->no_cache; });

  return [a, flags]() {
    cfg::serve_flags given;
    for (const auto& [opt, set] : flags)
      if (opt->count() > 0) set(given);
    auto overrides = cfg::to_overrides(given);
    if (!overrides) return fail(overrides.error());
    for (const auto& s : a->sets) {
      auto o = cfg::parse_set(s);
      if (!o) return fail(o.error());
      overrides.value().push_back(o.value());
    }
    // The plugins the config names load first: the config may use the names they register.
    auto c = cfg::resolve_config_with_plugins(a->config, cfg::self_executable(), overrides.value());
    if (!c) {
      std::fprintf(stderr, "troupe serve: invalid config:\n%s\n", c.error().c_str());
      return 2;
    }
    const auto& conf = c->config;
    spdlog::set_level(spdlog::level::from_str(conf.logging.level));
    std::printf("troupe serve: config from %s\n", c->source.c_str());
    troupe::app::serve_options opts;
    opts.config = conf;
    auto reloader = std::make_shared<cfg::config_reloader>(conf, a->config, cfg::self_executable(), overrides.value());
    opts.admin = [reloader](troupe::app::serve_instance& inst, const std::string& action) {
      return admin_action(*reloader, inst, action);
    };
    opts.config_metrics = [reloader] {
      return "# HELP troupe_config_version Version of the active config (1 at start, +1 per applied reload).\n"
             "# TYPE troupe_config_version gauge\ntroupe_config_version " +
             std::to_string(reloader->version()) + "\n";
    };
    return troupe::app::run_serve(opts);
  };
});

}  // namespace

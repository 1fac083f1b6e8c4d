// `troupe serve`: the pipeline behind an HTTP/WebSocket server (OpenAI-compatible API, the
// WebSocket protocol of docs/protocol.md, /health, /metrics, a chat page at /).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "app/command.hpp"
#include "net/serve.hpp"

namespace {

troupe::app::register_command reg("serve", "Serve the model over HTTP (OpenAI-compatible) and WebSocket", [](CLI::App& sub) {
  auto o = std::make_shared<troupe::net::serve_options>();
  auto listen = std::make_shared<std::string>("127.0.0.1:8080");
  auto ws_idle = std::make_shared<int>(30);
  auto resume_s = std::make_shared<int>(60);
  sub.add_option("--listen", *listen, "HOST:PORT to listen on (port 0: any free port)")->capture_default_str();
  sub.add_option("--model,-m", o->model, "GGUF model file")->capture_default_str();
  sub.add_option("--model-name", o->model_name, "name clients use in 'model' (default: the file name)");
  sub.add_option("--threads", o->server.io_threads, "I/O threads")->capture_default_str();
  sub.add_option("--backend-threads", o->backend_threads, "engine threads (0: all cores)")->capture_default_str();
  sub.add_option("--api-key", o->server.api_keys, "accepted API key (repeatable; none: no authentication)");
  sub.add_option("--kv-mb", o->kv_mb, "KV memory, MiB")->capture_default_str();
  sub.add_option("--max-seqs", o->max_num_seqs, "sequences decoded together")->capture_default_str();
  sub.add_option("--max-body", o->server.max_body_bytes, "largest HTTP body, bytes")->capture_default_str();
  sub.add_option("--max-ws-message", o->server.max_ws_message_bytes, "largest WebSocket message, bytes")
      ->capture_default_str();
  sub.add_option("--ws-idle", *ws_idle, "WebSocket idle timeout, s (pings at half)")->capture_default_str();
  sub.add_option("--resume-window", *resume_s, "seconds ended/orphaned WebSocket streams stay resumable")
      ->capture_default_str();
  auto* no_cache = sub.add_flag("--no-cache", "disable the response cache");
  return [o, listen, ws_idle, resume_s, no_cache]() {
    const auto colon = listen->rfind(':');
    if (colon == std::string::npos || colon == 0) {
      std::fprintf(stderr, "troupe serve: --listen wants HOST:PORT, got '%s'\n", listen->c_str());
      return 2;
    }
    try {
      const int port = std::stoi(listen->substr(colon + 1));
      if (port < 0 || port > 65535) throw std::out_of_range("port");
      o->server.port = static_cast<uint16_t>(port);
    } catch (const std::exception&) {
      std::fprintf(stderr, "troupe serve: bad port in --listen '%s'\n", listen->c_str());
      return 2;
    }
    o->server.host = listen->substr(0, colon);
    if (o->server.host.size() > 2 && o->server.host.front() == '[') o->server.host = o->server.host.substr(1, o->server.host.size() - 2);
    o->server.ws_idle_timeout = std::chrono::seconds(std::max(2, *ws_idle));
    o->server.resume_window = std::chrono::seconds(std::max(0, *resume_s));
    o->response_cache = !*no_cache;
    return troupe::net::run_serve(*o);
  };
});

}  // namespace
